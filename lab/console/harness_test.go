package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserReportsPageErrors: the harness sees what it must fail on —
// an uncaught exception, console.error and a resource that does not load
// — and nothing on a clean page.
func TestBrowserReportsPageErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/clean":
			_, _ = w.Write([]byte(`<!doctype html><html><head><link rel="icon" href="data:,"><title>ok</title></head><body><p id="p">fine</p></body></html>`))
		case "/broken":
			_, _ = w.Write([]byte(`<!doctype html><html><head><link rel="icon" href="data:,"></head><body><p id="p">broken</p>
<img src="/missing.png"><script>console.error("said an error"); throw new Error("thrown on purpose")</script></body></html>`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	b := newBrowser(t)
	b.run("clean page", chromedp.Navigate(srv.URL+"/clean"), chromedp.WaitVisible(chromedp.CSS("#p")))
	if errs := b.errors(); len(errs) != 0 {
		t.Fatalf("a clean page raised: %q", errs)
	}
	b.run("broken page", chromedp.Navigate(srv.URL+"/broken"), chromedp.WaitVisible(chromedp.CSS("#p")))
	want := []string{"thrown on purpose", "said an error", "404"}
	waitFor(t, "the page's three errors", func() bool {
		all := strings.Join(b.errors(), "\n")
		for _, w := range want {
			if !strings.Contains(all, w) {
				return false
			}
		}
		return true
	})
}
