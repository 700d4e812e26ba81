package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/idempotency"
)

// Server-issued tokens (README.md, "Tokens and the Redis pre-check").

type ctToken struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expires_at"`
}

func (e *ctEnv) issueToken(t testing.TB, opts ...ctOpt) ctToken {
	t.Helper()
	r := e.do(t, http.MethodPost, "/v1/idempotency-tokens", nil, opts...)
	if r.status != http.StatusCreated {
		t.Fatalf("issue token: %v, want 201", r)
	}
	var tok ctToken
	if err := json.Unmarshal(r.body, &tok); err != nil {
		t.Fatalf("issue token: %v in %s", err, r.body)
	}
	return tok
}

// expireToken moves a token's record past its window, as time would.
func (e *ctEnv) expireToken(t testing.TB, merchant, token string) {
	t.Helper()
	if err := e.db.Gorm.Exec("UPDATE idempotency_records SET expires_at = ? WHERE key_hash = ?",
		time.Now().UTC().Add(-time.Second), idempotency.KeyHash(idempotency.MerchantScope(merchant), token)).Error; err != nil {
		t.Fatal(err)
	}
}

var tokenPattern = regexp.MustCompile(`^itk_[a-z2-7]{26}$`)

func TestTokenIssue(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	keyPattern := regexp.MustCompile(idempotency.KeyPattern)
	before := time.Now()
	seen := map[string]bool{}
	for _, tc := range []struct {
		name string
		body []byte
		opts []ctOpt
	}{
		{"no body", nil, nil},
		{"{}", []byte(`{}`), nil},
		{"{} with white space", []byte(" { } "), nil},
		{"an Idempotency-Key is ignored", nil, []ctOpt{ctKey("ignored-1")}},
	} {
		r := e.do(t, http.MethodPost, "/v1/idempotency-tokens", tc.body, tc.opts...)
		if r.status != http.StatusCreated {
			t.Fatalf("%s: %v, want 201", tc.name, r)
		}
		var tok ctToken
		if err := json.Unmarshal(r.body, &tok); err != nil {
			t.Fatal(err)
		}
		if !tokenPattern.MatchString(tok.Token) || !keyPattern.MatchString(tok.Token) || seen[tok.Token] {
			t.Errorf("%s: token %q: want a new itk_ token matching the key pattern", tc.name, tok.Token)
		}
		seen[tok.Token] = true
		exp, err := time.Parse(time.RFC3339Nano, tok.ExpiresAt)
		if err != nil || exp.Before(before.Add(24*time.Hour-time.Second)) || exp.After(time.Now().Add(24*time.Hour+time.Second)) {
			t.Errorf("%s: expires_at %q (%v), want now + PAYSVC_IDEMPOTENCY_TTL (24h)", tc.name, tok.ExpiresAt, err)
		}
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		opts   []ctOpt
		status int
		code   string
	}{
		{"a field", []byte(`{"amount":1}`), nil, 400, "invalid_request"},
		{"not an object", []byte(`[]`), nil, 400, "invalid_request"},
		{"no API key", nil, []ctOpt{ctAuth("")}, 401, "unauthorized"},
		{"not JSON", []byte(`x`), []ctOpt{ctType("text/plain")}, 415, "unsupported_media_type"},
	} {
		ctProblem(t, e.do(t, http.MethodPost, "/v1/idempotency-tokens", tc.body, tc.opts...), tc.status, tc.code)
	}
	if n := e.db.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != int64(len(seen)) {
		t.Errorf("%d records, want %d (one per token issued)", n, len(seen))
	}
}

// TestTokenUse: a token is a key the server minted: the first request runs,
// later ones replay, another body is 422; another merchant's token, an
// unknown one and an expired one are 400 idempotency_token_invalid and
// nothing runs; the token is checked before the body (api/openapi.yaml, "Errors").
func TestTokenUse(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	tok := e.issueToken(t).Token

	// The key is checked before the body: a valid token with a bad body is
	// the body's 400, and leaves the token unused.
	ctProblem(t, e.create(t, tok, []byte(`{"merchant_order_no":"T-1","amount":1.5,"currency":"USD"}`)), 400, "invalid_request")

	first, o := e.mustCreate(t, tok, ctCreateBody("T-1", 100))
	if first.header.Get(ctReplayed) != "" {
		t.Errorf("first use answered as a replay")
	}
	replay := e.create(t, tok, ctCreateBody("T-1", 100))
	if replay.status != first.status || !bytes.Equal(replay.body, first.body) || replay.header.Get(ctReplayed) != "true" ||
		replay.header.Get("Location") != first.header.Get("Location") || replay.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Errorf("replay %v (Location %q), want the first answer %v byte for byte with %s: true",
			replay, replay.header.Get("Location"), first, ctReplayed)
	}
	ctProblem(t, e.create(t, tok, ctCreateBody("T-1", 101)), 422, "idempotency_key_reused")
	ctProblem(t, e.cancel(t, tok, o.OrderNo, nil), 422, "idempotency_key_reused")
	// A used token with a bad body: still a valid key, so the body's 400.
	ctProblem(t, e.create(t, tok, []byte(`{`)), 400, "invalid_request")

	// Any merchant POST takes a token: a cancel.
	cancelTok := e.issueToken(t).Token
	if r := e.cancel(t, cancelTok, o.OrderNo, nil); r.status != 200 {
		t.Fatalf("cancel with a token: %v", r)
	}
	if r := e.cancel(t, cancelTok, o.OrderNo, []byte(`{}`)); r.status != 200 || r.header.Get(ctReplayed) != "true" {
		t.Errorf("cancel replay with a token: %v replayed=%q", r, r.header.Get(ctReplayed))
	}

	globexTok := e.issueToken(t, ctAs(ctGlobexKey)).Token
	expired := e.issueToken(t).Token
	e.expireToken(t, "acme", expired)
	for _, tc := range []struct {
		name string
		key  string
		body []byte
		opts []ctOpt
	}{
		{"another merchant's token", globexTok, ctCreateBody("T-2", 100), nil},
		{"acme's token used by globex", tok, ctCreateBody("T-1", 100), []ctOpt{ctAs(ctGlobexKey)}},
		{"never issued", "itk_aaaaaaaaaaaaaaaaaaaaaaaaaa", ctCreateBody("T-3", 100), nil},
		{"not even token-shaped", "itk_x", ctCreateBody("T-4", 100), nil},
		{"expired", expired, ctCreateBody("T-5", 100), nil},
		{"unknown token before a bad body", "itk_bbbbbbbbbbbbbbbbbbbbbbbbbb", []byte(`{"merchant_order_no":"T-6","amount":"x"}`), nil},
		{"expired token before a bad body", expired, []byte(`{`), nil},
		{"unknown token before an unknown field", "itk_cccccccccccccccccccccccccc", []byte(`{"merchant_order_no":"T-7","amount":1,"currency":"USD","x":1}`), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctProblem(t, e.create(t, tc.key, tc.body, tc.opts...), 400, "idempotency_token_invalid")
		})
	}
	for _, mon := range []string{"T-2", "T-3", "T-4", "T-5", "T-6", "T-7"} {
		if n := e.ordersWith(t, mon); n != 0 {
			t.Errorf("order %s: %d rows, want none: an invalid token runs nothing", mon, n)
		}
	}
	if n := e.ordersWith(t, "T-1"); n != 1 {
		t.Errorf("order T-1: %d rows, want 1", n)
	}
	// globex's token is untouched by acme's attempt: it still runs for globex.
	if r := e.create(t, globexTok, ctCreateBody("T-2", 100), ctAs(ctGlobexKey)); r.status != 201 || r.header.Get(ctReplayed) != "" {
		t.Errorf("globex's own use of its token: %v", r)
	}
	// invalid_key counts the refusals (an outcome of README.md's "Metrics").
	if got := ctCounter(t, e.app, "/v1/orders", "invalid_key"); got != 8 {
		t.Errorf("invalid_key = %v, want 8", got)
	}
}

// TestTokenExpiredAfterUse: the window counts from issue: once it is over,
// even the replay of a used token is refused, and purge removes tokens,
// used or not, like any expired record.
func TestTokenExpiredAfterUse(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	used, unused, live := e.issueToken(t).Token, e.issueToken(t).Token, e.issueToken(t).Token
	e.mustCreate(t, used, ctCreateBody("TE-1", 100))
	e.expireToken(t, "acme", used)
	e.expireToken(t, "acme", unused)
	ctProblem(t, e.create(t, used, ctCreateBody("TE-1", 100)), 400, "idempotency_token_invalid")
	ctProblem(t, e.create(t, unused, ctCreateBody("TE-2", 100)), 400, "idempotency_token_invalid")
	n, err := e.app.Purge(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("purge: %d, %v; want the 2 expired tokens", n, err)
	}
	if e.records(t, used)+e.records(t, unused) != 0 || e.records(t, live) != 1 {
		t.Errorf("after purge: expired tokens' records %d, live token's %d; want 0 and 1",
			e.records(t, used)+e.records(t, unused), e.records(t, live))
	}
	ctProblem(t, e.create(t, used, ctCreateBody("TE-1", 100)), 400, "idempotency_token_invalid")
	if n := e.ordersWith(t, "TE-1") + e.ordersWith(t, "TE-2"); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestTokenFailureKeepsToken: an execution that fails (a 5xx) stores
// nothing and puts the token back, so the client's retry runs.
func TestTokenFailureKeepsToken(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	e := ctNewWith(t, app.Options{BeforeCommit: func(context.Context, idempotency.Request) error {
		if fail.CompareAndSwap(true, false) {
			return errors.New("injected failure before COMMIT")
		}
		return nil
	}})
	tok := e.issueToken(t).Token
	if r := e.create(t, tok, ctCreateBody("TF-1", 100)); r.status < 500 {
		t.Fatalf("injected failure answered %v, want a 5xx", r)
	}
	if n := e.ordersWith(t, "TF-1"); n != 0 {
		t.Fatalf("failed request left %d orders", n)
	}
	// Another body is fine now: the failure bound the token to nothing.
	r, _ := e.mustCreate(t, tok, ctCreateBody("TF-2", 100))
	if r.header.Get(ctReplayed) != "" {
		t.Errorf("retry after the failure replayed")
	}
	if n := e.ordersWith(t, "TF-2"); n != 1 {
		t.Errorf("%d orders TF-2, want 1", n)
	}
}

// TestTokenConcurrentUses: 8 uses of one token released together (a
// double click, times four) make one order; every use ends with its
// answer.
func TestTokenConcurrentUses(t *testing.T) {
	t.Parallel()
	e := ctNew(t)
	const uses, rounds = 8, 5
	for round := range rounds {
		tok := e.issueToken(t).Token
		mon := "TC-" + string(rune('A'+round))
		body := ctCreateBody(mon, 100)
		var (
			wg      sync.WaitGroup
			barrier = make(chan struct{})
			bodies  [uses][]byte
			fresh   atomic.Int32
		)
		for i := range uses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-barrier
				deadline := time.Now().Add(60 * time.Second)
				for {
					r := e.create(t, tok, body)
					if r.status == http.StatusConflict && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond) // in flight: retry, as a client does
						continue
					}
					if r.status != http.StatusCreated {
						t.Errorf("use %d: %v", i, r)
						return
					}
					if r.header.Get(ctReplayed) == "" {
						fresh.Add(1)
					}
					bodies[i] = r.body
					return
				}
			}()
		}
		close(barrier)
		wg.Wait()
		if n := e.ordersWith(t, mon); n != 1 {
			t.Errorf("round %d: %d orders, want 1", round, n)
		}
		if fresh.Load() != 1 {
			t.Errorf("round %d: %d first answers, want 1", round, fresh.Load())
		}
		for i := range bodies {
			if !bytes.Equal(bodies[i], bodies[0]) {
				t.Errorf("round %d: use %d answered %s, use 0 %s", round, i, bodies[i], bodies[0])
			}
		}
	}
}
