package faultsuite

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/poll"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// TestProviderCallsSIGKILL: three serve processes make one table of
// provider refunds (README.md, "Calls to providers"); one is SIGKILLed while
// its calls are in flight. Every refund reaches the provider under exactly
// one key, its own, however often it is repeated (at-least-once: a repeat
// with the same key is allowed, another key never), no two calls of one
// refund overlap, and every call ends done.
func TestProviderCallsSIGKILL(t *testing.T) {
	const n = 300
	d := dbtest.New(t)
	keys := make([]string, n)
	insert := func() {
		now := time.Now().UTC()
		var (
			sb   strings.Builder
			args []any
		)
		sb.WriteString(`INSERT INTO provider_calls (id, provider, idem_key, kind, refund_no, order_no, payment_txn_id, amount, currency,
			status, next_attempt_at, created_at, updated_at) VALUES `)
		for i := range n {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString("(?, 'mockpay', ?, 0, ?, ?, ?, 100, 'EUR', 0, ?, ?, ?)")
			keys[i] = fmt.Sprintf("rfd_kill_%03d", i)
			args = append(args, fmt.Sprintf("pcl_kill_%03d", i), keys[i], keys[i], fmt.Sprintf("ord_kill_%03d", i),
				[]byte(fmt.Sprintf("txn_kill_%03d", i)), now, now, now)
		}
		if _, err := db.Exec(context.Background(), d.Gorm, sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	cc := newCallCounter()
	var (
		mu    sync.Mutex
		wrong []string
	)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		if !strings.Contains(string(raw), `"reference":"`+key+`"`) {
			mu.Lock()
			wrong = append(wrong, key+" "+string(raw))
			mu.Unlock()
		}
		cc.call(key, 500*time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":"re_%s","status":"pending"}`, key)
	}))
	t.Cleanup(provider.Close)
	made, busy := cc.calls, cc.busy
	env := []string{"PAYSVC_PROVIDER_API=mockpay=" + provider.URL + " sk_kill_test_key", "PAYSVC_NOTIFY_TIMEOUT=2s"}
	procs := []*testproc.Serve{
		startServe(t, "calls-1", d.DSN, env...),
		startServe(t, "calls-2", d.DSN, env...),
		startServe(t, "calls-3", d.DSN, env...),
	}
	insert()
	// Each relay claims up to 64 calls at once: with more than two
	// relays' worth in flight, every relay, the one killed too, has some.
	if !poll.Until(60*time.Second, 5*time.Millisecond, func() bool { return busy() > 2*64 }) {
		t.Fatalf("only %d calls in flight within 60 s", busy())
	}
	claimed := d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE claim IS NOT NULL`)
	procs[0].Kill(t)
	t.Logf("calls-1 SIGKILLed after %d calls (%d in flight), %d calls claimed at that moment", made(), busy(), claimed)
	if !poll.Until(90*time.Second, 50*time.Millisecond, func() bool { return d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 1`) >= n }) {
		t.Fatalf("%d of %d calls done within 90 s of the kill", d.Count(t, `SELECT COUNT(*) FROM provider_calls WHERE status = 1`), n)
	}
	repeats := cc.repeats(t, keys, "refund")
	cc.mu.Lock()
	defer cc.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(cc.hits) != n {
		t.Errorf("%d distinct keys at the provider, want %d", len(cc.hits), n)
	}
	for _, w := range wrong {
		t.Errorf("call whose reference is not its key: %s", w)
	}
	t.Logf("%d refunds, %d calls with %d distinct keys, %d repeats (the killed relay's calls whose outcome it never recorded)",
		n, cc.total, len(cc.hits), repeats)
}
