package faultsuite

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// revocationLimit is the promise: a revoked or expired key is refused by
// every instance within 5 s.
const revocationLimit = 5 * time.Second

// keysRun is what the merchant and key commands printed and logged.
type keysRun struct {
	mu     sync.Mutex
	stderr strings.Builder
}

// command runs one operator command of the binary on dsn and returns its
// stdout and exit code; its stderr is kept, to be searched for keys.
func (r *keysRun) command(t *testing.T, dsn string, args ...string) (string, int) {
	t.Helper()
	return r.shell(t, dsn, `"$0" "$@"`, args...)
}

// shell runs script with sh, $0 the binary and $@ args, as an operator's
// script would.
func (r *keysRun) shell(t *testing.T, dsn, script string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", script, paysvcBin}, args...)...)
	// A race-built binary sleeps a second at exit by default; the
	// revocation's timing is measured from the command's return.
	cmd.Env = testproc.Env("PAYSVC_DSN="+dsn, "PAYSVC_LOG_LEVEL=debug", "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := testproc.Start(cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	r.mu.Lock()
	r.stderr.Write(stderr.Bytes())
	r.mu.Unlock()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	if code != 0 {
		t.Logf("%v: exit %d, stderr %s", args, code, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), code
}

var keyIDPattern = regexp.MustCompile(`^id (key_[0-9A-Z]{26}) prefix (sk_[0-9A-Za-z]{4}) expires `)

// issue runs a command that prints a new key: the key, then its id.
func (r *keysRun) issue(t *testing.T, dsn string, args ...string) (key, id string) {
	t.Helper()
	out, code := r.command(t, dsn, args...)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("%v: exit %d, output %q", args, code, out)
	}
	m := keyIDPattern.FindStringSubmatch(lines[1])
	if m == nil || !strings.HasPrefix(lines[0], m[2]) {
		t.Fatalf("%v: output %q", args, out)
	}
	return lines[0], m[1]
}

// getOrder GETs an order with bearer key and returns the status and body.
func getOrder(c *http.Client, baseURL, key, orderNo string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, baseURL+ordersPath+"/"+orderNo, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// createWith creates an order with bearer key on baseURL, through the
// merchant client, and returns its order_no.
func createWith(t *testing.T, baseURL, key, merchantOrderNo string) string {
	t.Helper()
	o, err := client.New(baseURL, key, client.WithHTTPClient(keepAliveClient)).CreateOrder(t.Context(),
		createReq(merchantOrderNo, 1000), client.WithIdempotencyKey(merchantOrderNo))
	if err != nil {
		t.Fatalf("create %s on %s: %v", merchantOrderNo, baseURL, err)
	}
	return o.OrderNo
}

// expectAccepted fails the test unless every instance accepts key now.
func expectAccepted(t *testing.T, procs []*testproc.Serve, key, orderNo, what string) {
	t.Helper()
	for _, p := range procs {
		if code, body, err := getOrder(keepAliveClient, p.URL, key, orderNo); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %s refused on %s: %d %s %v", what, key[:7], p.Name, code, body, err)
		}
	}
}

// refusedBy polls every instance with key until each answers 401, and
// fails the test for an instance that still accepts it limit after since.
// It returns how long after since each refused it, and the 401 body.
func refusedBy(t *testing.T, procs []*testproc.Serve, key, orderNo string, since time.Time, limit time.Duration) ([]time.Duration, []byte) {
	t.Helper()
	took := make([]time.Duration, len(procs))
	var unauthorized []byte
	for i, p := range procs {
		for {
			code, body, err := getOrder(keepAliveClient, p.URL, key, orderNo)
			if err != nil || (code != http.StatusOK && code != http.StatusUnauthorized) {
				t.Fatalf("%s: %d %s %v", p.Name, code, body, err)
			}
			if code == http.StatusUnauthorized {
				took[i] = time.Since(since)
				unauthorized = body
				break
			}
			if time.Since(since) > limit {
				t.Fatalf("%s still accepts the key %v after it should be refused (limit %v)", p.Name, time.Since(since), limit)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return took, unauthorized
}

// keyTime is the expires_at or revoked_at (column) of key id, as stored.
func keyTime(t *testing.T, d *dbtest.DB, column, id string) time.Time {
	t.Helper()
	var at time.Time
	if err := d.Gorm.Raw("SELECT "+column+" FROM api_keys WHERE id = ?", id).Row().Scan(&at); err != nil {
		t.Fatalf("%s of %s: %v", column, id, err)
	}
	return at
}

// notEarly fails the test if a key was refused before its expiry: the
// instances and the command share this host's clock.
func notEarly(t *testing.T, took []time.Duration, what string) {
	t.Helper()
	for i, d := range took {
		if d < -10*time.Millisecond {
			t.Errorf("serve-%d refused %s %v before its expiry", i+1, what, -d)
		}
	}
}

// TestDatabaseKeysAcrossInstances: a merchant and its key made with the
// commands serve three instances at once; a roll, a revocation and an
// expiry each reach all three within 5 s; a key appears nowhere but in
// the output of the command that made it.
func TestDatabaseKeysAcrossInstances(t *testing.T) {
	d := dbtest.New(t)
	var run keysRun
	if out, code := run.command(t, d.DSN, "merchants", "create", "shop", "--name", "Shop Ltd"); code != 0 || out != "created shop\n" {
		t.Fatalf("merchants create: exit %d, %q", code, out)
	}
	// The README's way to take a new key: the first line, alone.
	out, code := run.shell(t, d.DSN, `KEY=$("$0" keys create --merchant shop | head -1) && printf %s "$KEY"`)
	if code != 0 || !regexp.MustCompile(`^sk_[0-9A-Za-z]{40}$`).MatchString(out) {
		t.Fatalf("KEY=$(paysvc keys create --merchant shop | head -1): exit %d, %q", code, out)
	}
	first := out
	procs := make([]*testproc.Serve, 3)
	for i := range procs {
		procs[i] = startServe(t, fmt.Sprintf("serve-%d", i+1), d.DSN, "PAYSVC_LOG_LEVEL=debug")
	}
	// The three started together, each recording PAYSVC_API_KEYS's
	// merchant: one row, and the operator's merchant left as it was.
	if out, code := run.command(t, d.DSN, "merchants", "list"); code != 0 ||
		!regexp.MustCompile(`(?m)^id `+merchant+` created \S+ name ""$`).MatchString(out) || !strings.Contains(out, `id shop created `) ||
		!strings.HasSuffix(out, `name "Shop Ltd"`+"\n") || strings.Count(out, "\n") != 2 {
		t.Fatalf("merchants list after the starts: exit %d\n%s", code, out)
	}
	var orderNo string
	for i, p := range procs {
		orderNo = createWith(t, p.URL, first, fmt.Sprintf("keys-%d", i))
	}
	expectAccepted(t, procs, first, orderNo, "new key")
	list, _ := run.command(t, d.DSN, "keys", "list", "--merchant", "shop")
	if !strings.Contains(list, " prefix "+first[:7]+" ") || strings.Contains(list, first) || strings.Contains(list, first[7:]) {
		t.Fatalf("keys list shows no prefix, or the key:\n%s", list)
	}
	firstID := strings.Fields(list)[1]

	// Roll with an overlap of 3 s: both keys work, then only the new one.
	rolled, rolledID := run.issue(t, d.DSN, "keys", "roll", firstID, "--expires-in", "3s")
	expectAccepted(t, procs, first, orderNo, "old key during the overlap")
	expectAccepted(t, procs, rolled, orderNo, "rolled key")
	took, rollBody := refusedBy(t, procs, first, orderNo, keyTime(t, d, "expires_at", firstID), revocationLimit)
	t.Logf("old key refused %v after its expiry (instance by instance)", took)
	notEarly(t, took, "the rolled-over key")
	expectAccepted(t, procs, rolled, orderNo, "rolled key after the overlap")

	// Revoke: refused by each of the three within 5 s of the revocation.
	if out, code := run.command(t, d.DSN, "keys", "revoke", rolledID); code != 0 || out != "revoked "+rolledID+"\n" {
		t.Fatalf("revoke: exit %d %q", code, out)
	}
	revokedAt := keyTime(t, d, "revoked_at", rolledID)
	returned := time.Since(revokedAt)
	took, revokeBody := refusedBy(t, procs, rolled, orderNo, revokedAt, revocationLimit)
	t.Logf("revoked key refused %v after revoked_at (the command had returned %v after it)", took, returned.Round(time.Millisecond))

	// A key created to expire: it works, then it is refused.
	expiring, expiringID := run.issue(t, d.DSN, "keys", "create", "--merchant", "shop", "--expires-in", "3s")
	expectAccepted(t, procs, expiring, orderNo, "expiring key")
	took, expiryBody := refusedBy(t, procs, expiring, orderNo, keyTime(t, d, "expires_at", expiringID), revocationLimit)
	t.Logf("expiring key refused %v after its expiry", took)
	notEarly(t, took, "the expiring key")

	// One 401, whatever the cause.
	unknown := "sk_" + strings.Repeat("Q", 40)
	for _, k := range []string{unknown, "not-a-key"} {
		code, body, err := getOrder(keepAliveClient, procs[0].URL, k, orderNo)
		if err != nil || code != http.StatusUnauthorized || !bytes.Equal(body, revokeBody) {
			t.Errorf("key %q: %d %s, want the 401 of a revoked key: %s", k, code, body, revokeBody)
		}
	}
	if !bytes.Equal(rollBody, revokeBody) || !bytes.Equal(expiryBody, revokeBody) {
		t.Errorf("401 bodies differ: rolled-over %s, revoked %s, expired %s", rollBody, revokeBody, expiryBody)
	}

	// last_used_at, to the minute, off the request path.
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, _ = run.command(t, d.DSN, "keys", "list", "--merchant", "shop")
		if !strings.Contains(list, "last_used never") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a used key still shows no last use:\n%s", list)
		}
		time.Sleep(200 * time.Millisecond)
	}

	keys := []string{first, rolled, expiring, apiKey}
	dump := dumpDatabase(t, d)
	logs := run.stderr.String()
	for _, p := range procs {
		logs += p.Output()
	}
	for _, k := range keys {
		for _, needle := range []string{k, strings.TrimPrefix(k, "sk_")} {
			if strings.Contains(dump, needle) {
				t.Errorf("the database holds key %s…", k[:7])
			}
			if strings.Contains(logs, needle) {
				t.Errorf("the logs hold key %s…", k[:7])
			}
		}
	}
	if !strings.Contains(dump, first[:7]) {
		t.Error("the dump lacks the key's prefix: did it read api_keys?")
	}
	t.Logf("dump of %d bytes and %d bytes of logs searched for %d keys", len(dump), len(logs), len(keys))
}

// dumpDatabase renders every row of every table of d as text, stored
// idempotent responses decoded.
func dumpDatabase(t *testing.T, d *dbtest.DB) string {
	t.Helper()
	codec := idempotency.NewCodec()
	var b strings.Builder
	for _, table := range d.Rows(t, `SELECT TABLE_NAME AS name FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?`, d.Name) {
		for _, row := range d.Rows(t, "SELECT * FROM `"+fmt.Sprint(table["name"])+"`") {
			fmt.Fprintln(&b, table["name"], row)
			if table["name"] == "idempotency_records" && row["response"] != nil {
				status, _ := strconv.Atoi(fmt.Sprint(row["response_status"]))
				format, _ := strconv.Atoi(fmt.Sprint(row["response_format"]))
				resp, err := codec.Decode(status, uint8(format), []byte(row["response"].(string)))
				if err != nil {
					t.Fatalf("decode a stored response: %v", err)
				}
				fmt.Fprintf(&b, "  decoded: %s %s\n", resp.Location, resp.Body)
			}
		}
	}
	return b.String()
}

// TestRandomKeyFlood: 1,000 requests with random bearer keys at once,
// three times over, against one instance, while a good database key keeps
// being used. Every random key gets 401 and none a 5xx; each costs one
// read of api_keys and leaves nothing behind (the cache still holds the
// good key alone, the goroutines go back down); the good key's requests
// are answered meanwhile with no read at all.
func TestRandomKeyFlood(t *testing.T) {
	d := dbtest.New(t)
	var run keysRun
	if _, code := run.command(t, d.DSN, "merchants", "create", "shop"); code != 0 {
		t.Fatal("merchants create")
	}
	good, _ := run.issue(t, d.DSN, "keys", "create", "--merchant", "shop")
	p := startServe(t, "serve", d.DSN)
	orderNo := createWith(t, p.URL, good, "flood-1")
	const (
		lookups = `paysvc_api_key_lookups_total{result="%s"}`
		flood   = 1000
	)
	before := scrape(t, p)
	var firstHeap float64
	for round := 1; round <= 3; round++ {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: flood}, Timeout: 30 * time.Second}
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses = map[int]int{}
			goodOK   int
		)
		start := make(chan struct{})
		for range flood {
			wg.Go(func() {
				<-start
				code, body, err := getOrder(client, p.URL, randomKey(), orderNo)
				mu.Lock()
				defer mu.Unlock()
				statuses[code]++
				if err != nil || code != http.StatusUnauthorized {
					t.Errorf("random key: %d %s %v", code, body, err)
				}
			})
		}
		for range 4 {
			wg.Go(func() {
				<-start
				for range 25 {
					code, body, err := getOrder(client, p.URL, good, orderNo)
					mu.Lock()
					if err != nil || code != http.StatusOK {
						t.Errorf("good key during the flood: %d %s %v", code, body, err)
					} else {
						goodOK++
					}
					mu.Unlock()
				}
			})
		}
		began := time.Now()
		close(start)
		wg.Wait()
		elapsed := time.Since(began)
		client.CloseIdleConnections()
		after := scrape(t, p)
		unknown := after[fmt.Sprintf(lookups, "unknown")] - before[fmt.Sprintf(lookups, "unknown")]
		found := after[fmt.Sprintf(lookups, "found")] - before[fmt.Sprintf(lookups, "found")]
		if unknown != float64(flood*round) || found != 0 || after[fmt.Sprintf(lookups, "error")] != 0 {
			t.Errorf("round %d: %v reads of unknown keys (want %d), %v of found keys (want 0: the good key is cached), %v errors",
				round, unknown, flood*round, found, after[fmt.Sprintf(lookups, "error")])
		}
		if n := after["paysvc_api_keys_cached"]; n != 1 {
			t.Errorf("round %d: %v keys cached, want the good one alone", round, n)
		}
		// The server's goroutines of the flood's connections end once the
		// client closed them.
		var goroutines float64
		for wait := time.Now().Add(10 * time.Second); ; {
			goroutines = scrape(t, p)["go_goroutines"]
			if goroutines <= before["go_goroutines"]+16 || time.Now().After(wait) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if goroutines > before["go_goroutines"]+16 {
			t.Errorf("round %d: %v goroutines, %v before the floods", round, goroutines, before["go_goroutines"])
		}
		// What a flood leaves in the heap does not grow with the number
		// of random keys seen (the first round's garbage is the yardstick).
		heap := after["go_memstats_heap_inuse_bytes"]
		if round == 1 {
			firstHeap = heap
		} else if heap > firstHeap+32<<20 {
			t.Errorf("round %d: heap in use %.1f MiB, %.1f after the first", round, heap/(1<<20), firstHeap/(1<<20))
		}
		t.Logf("round %d: %d random keys in %v: %v; good key %d × 200; heap in use %.1f → %.1f MiB, goroutines %v → %v",
			round, flood, elapsed.Round(time.Millisecond), statuses, goodOK,
			before["go_memstats_heap_inuse_bytes"]/(1<<20), after["go_memstats_heap_inuse_bytes"]/(1<<20),
			before["go_goroutines"], goroutines)
	}
}

// randomKey is a well-formed database key that no database holds: each
// costs the service a read, the worst a guesser can do.
func randomKey() string {
	const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 40)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return "sk_" + string(b)
}
