package console

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// stepTimeout bounds one browser step: generous, the machine may be busy.
const stepTimeout = 45 * time.Second

// browser is one headless Chromium with a fresh profile, and every
// JavaScript error, failed load or console error any of its pages raised.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu   sync.Mutex
	errs []string
}

// chromiumPath finds Debian's chromium (scripts/ensure-chromium.sh
// installs it). Without one the test fails: a browser test that did not
// run must not pass.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: scripts/ensure-chromium.sh installs it")
	return ""
}

// newBrowser starts Chromium headless. Its proxy is a port nobody
// answers (127.0.0.1:9): loopback is never proxied, so the console loads,
// and anything a page tried to fetch from elsewhere fails and is
// reported as an error.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, in CI
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.ProxyServer("127.0.0.1:9"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	// Started before any page: Console subscribes when it returns, and
	// the first Run starts the browser.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.record("%s (%s)", m, m.URL)
			}
		}
	}()
	return b
}

func (b *browser) record(format string, args ...any) {
	b.mu.Lock()
	b.errs = append(b.errs, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// errors returns what the pages raised so far.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// expectError waits for the error a step raises on purpose (a refusal
// the browser logs as a failed load) and takes it off the list: any other
// error stays, and fails the test.
func (b *browser) expectError(what string) {
	b.t.Helper()
	waitFor(b.t, "the browser's report of "+what, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, e := range b.errs {
			if strings.Contains(e, what) {
				b.errs = append(b.errs[:i], b.errs[i+1:]...)
				return true
			}
		}
		return false
	})
}

// run runs one step (actions), failing the test with its name.
func (b *browser) run(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	start := time.Now()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page %s)", step, err, b.location())
	}
	b.t.Logf("%s: %v", step, time.Since(start).Round(time.Millisecond))
}

// location is the page's URL, for messages.
func (b *browser) location() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	return loc
}

// text reads the visible text of the first element the CSS selector sel
// matches, once it is visible.
func (b *browser) text(step, sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", step, err, b.location())
	}
	return strings.TrimSpace(s)
}

// screenshot writes the whole page to docs/name when PAYSVC_SCREENSHOTS
// is set: README's pictures are taken by this test.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if os.Getenv("PAYSVC_SCREENSHOTS") == "" {
		return
	}
	root, err := testproc.ModuleRoot()
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(root, "docs", name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
