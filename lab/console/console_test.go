package console

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/paysvc/paysvc/client"
)

// eval runs a JavaScript expression in the page and returns its value.
func eval[T any](b *browser, step, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %v (page %s)", step, err, b.location())
	}
	return v
}

// waitDone waits for the page an action answered with, which says what
// it did in #done (the page before it may show another action's #done).
func waitDone(what string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.Search(`//*[@id="done"][contains(., "` + what + `")]`))
}

// page is the data-page of the page shown.
func (b *browser) page() string {
	return eval[string](b, "which page", `document.body.dataset.page || ""`)
}

// count reads the figure an overview element carries in data-value.
func (b *browser) count(id string) int64 {
	b.t.Helper()
	s := eval[string](b, "read "+id, `(document.getElementById(`+strconv.Quote(id)+`) || {dataset: {}}).dataset.value || "missing"`)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		b.t.Fatalf("overview %s: %q", id, s)
	}
	return n
}

// timelineItem is one entry of an order's timeline as the page shows it.
type timelineItem struct {
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Key     string `json:"key"`
}

func (b *browser) timeline() []timelineItem {
	return eval[[]timelineItem](b, "read the timeline", `[...document.querySelectorAll('li[data-test="timeline-item"]')].map(li => ({
		kind: li.dataset.kind || "", outcome: li.dataset.outcome || "",
		key: (li.querySelector('[data-test="idem-key"]') || {textContent: ""}).textContent.trim()}))`)
}

// TestConsoleInBrowser walks the console as an operator would, in a real
// headless Chromium: sign in (a wrong key first), the overview's counts
// against the database, an order found by its merchant_order_no and its
// timeline with the duplicate callback as a replay under its key, a
// failed delivery redelivered and its new attempt, a disabled endpoint
// enabled and recovered, a key revoked and refused over the API, every
// other page, sign-out; and no page raises a JavaScript error.
func TestConsoleInBrowser(t *testing.T) {
	f := newFixture(t)
	b := newBrowser(t)

	b.run("open the console", chromedp.Navigate(f.base+"/console"), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	if p := b.page(); p != "signin" {
		t.Fatalf("without a session: page %q, want the sign-in page", p)
	}
	b.run("a wrong key", chromedp.SendKeys(chromedp.CSS("#signin-key"), "op-console-test-key-0123456789abcdeX"),
		chromedp.Click(chromedp.CSS("#signin-submit")), chromedp.WaitVisible(chromedp.CSS("#signin-error")))
	// The refusal is a 401, which the browser reports as a failed load.
	b.expectError("status of 401 (Unauthorized) (" + f.base + "/console/signin)")
	b.run("sign in", chromedp.Clear(chromedp.CSS("#signin-key")), chromedp.SendKeys(chromedp.CSS("#signin-key"), operatorKey),
		chromedp.Click(chromedp.CSS("#signin-submit")), chromedp.WaitVisible(chromedp.CSS(`body[data-page="overview"]`)))

	// The overview's figures are the database's.
	today := `created_at >= UTC_DATE()`
	for _, c := range []struct{ id, query string }{
		{"ov-orders-PAID", `SELECT COUNT(*) FROM orders WHERE status = 'PAID' AND ` + today},
		{"ov-replayed", `SELECT COUNT(*) FROM request_log WHERE outcome = 'replayed' AND at >= UTC_DATE()`},
		{"ov-requests-total", `SELECT COUNT(*) FROM request_log WHERE at >= UTC_DATE()`},
		{"ov-flagged", `SELECT COUNT(*) FROM payments WHERE result IN ('duplicate_payment', 'late_payment', 'amount_mismatch')`},
	} {
		want := f.d.Count(t, c.query)
		if got := b.count(c.id); got != want {
			t.Errorf("overview %s: %d, the database says %d", c.id, got, want)
		}
	}
	if got := b.count("ov-orders-PAID"); got != 2 {
		t.Errorf("overview: %d paid orders, want the fixture's 2", got)
	}
	b.screenshot("console-overview.png")

	// The order, found by the merchant's number.
	b.run("search the order", chromedp.Click(chromedp.CSS("#nav-orders")), chromedp.WaitVisible(chromedp.CSS("#orders-search")),
		chromedp.SendKeys(chromedp.CSS("#q-merchant"), merchantID),
		chromedp.SendKeys(chromedp.CSS("#q-merchant-order-no"), f.merchantOrderNo), chromedp.Click(chromedp.CSS("#q-submit")),
		// The answer's form carries the search as its value attribute;
		// the page before it, listing every order, has the row too.
		chromedp.WaitVisible(chromedp.CSS(`#q-merchant-order-no[value="`+f.merchantOrderNo+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-order-no="`+f.orderNo+`"]`)))
	if n := eval[int](b, "count the results", `document.querySelectorAll('tr[data-test="order-row"]').length`); n != 1 {
		t.Errorf("search by merchant_order_no %s: %d rows, want 1", f.merchantOrderNo, n)
	}
	link := `tr[data-order-no="` + f.orderNo + `"] a[data-test="order-link"]`
	b.run("open its timeline", chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.CSS("#timeline")))
	if got := b.text("the order's number", "#order-no"); got != f.orderNo {
		t.Fatalf("timeline of %q, want %s", got, f.orderNo)
	}
	var ran, replayed int
	attemptsBefore := 0
	for _, it := range b.timeline() {
		switch {
		case it.Kind == "request" && it.Key == f.callbackKey && it.Outcome == "ran":
			ran++
		case it.Kind == "request" && it.Key == f.callbackKey && it.Outcome == "replayed":
			replayed++
		case it.Kind == "attempt":
			attemptsBefore++
		}
	}
	if ran != 1 || replayed != 1 {
		t.Errorf("timeline: the callback under %s ran %d times and was replayed %d times, want 1 and 1: %+v",
			f.callbackKey, ran, replayed, b.timeline())
	}
	b.screenshot("console-timeline.png")
	timelineURL := b.location()

	// A failed delivery, redelivered once its endpoint answers again.
	deliveryID := f.scalar(`SELECT id FROM deliveries WHERE event_id = '` + f.paidEvent + `' AND endpoint_id = ''`)
	b.run("failed deliveries", chromedp.Click(chromedp.CSS("#nav-deliveries")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-delivery-id="`+deliveryID+`"]`)))
	f.envRcv.ok.Store(true)
	b.run("redeliver", chromedp.Click(chromedp.CSS("#redeliver-"+deliveryID)), waitDone("redelivered "+f.paidEvent))
	waitFor(t, "the redelivered event at its endpoint", func() bool { return f.envRcv.received(f.paidEvent) > 0 })
	// The attempt is recorded once the relay has its answer: the page is
	// reloaded until it shows it.
	attemptsAfter := 0
	waitFor(t, "the new attempt on the order's timeline", func() bool {
		b.run("the timeline again", chromedp.Navigate(timelineURL), chromedp.WaitVisible(chromedp.CSS("#timeline")))
		attemptsAfter = 0
		for _, it := range b.timeline() {
			if it.Kind == "attempt" {
				attemptsAfter++
			}
		}
		return attemptsAfter > attemptsBefore
	})
	t.Logf("timeline: %d delivery attempts before the redelivery, %d after", attemptsBefore, attemptsAfter)

	// The disabled endpoint, enabled, then its failed deliveries recovered.
	row := `tr[data-endpoint-id="` + f.badID + `"]`
	b.run("endpoints", chromedp.Click(chromedp.CSS("#nav-endpoints")), chromedp.WaitVisible(chromedp.CSS(row+`[data-health="disabled"]`)))
	f.badRcv.ok.Store(true)
	b.run("enable", chromedp.Click(chromedp.CSS("#enable-"+f.badID)), waitDone("enabled "+f.badID),
		chromedp.WaitVisible(chromedp.CSS(row)))
	if h := eval[string](b, "its health", `document.querySelector('`+row+`').dataset.health`); h == "disabled" {
		t.Fatalf("endpoint %s still disabled after enable", f.badID)
	}
	b.run("recover", chromedp.Click(chromedp.CSS("#recover-"+f.badID)), waitDone("recovered "+f.badID))
	waitFor(t, "the recovered event at the endpoint", func() bool { return f.badRcv.received(f.paidEvent) > 0 })

	// A key revoked here is refused over the API.
	keyRow := `tr[data-key-id="` + f.keyID + `"]`
	b.run("merchants", chromedp.Click(chromedp.CSS("#nav-merchants")), chromedp.WaitVisible(chromedp.CSS(keyRow+`[data-revoked="false"]`)))
	b.run("revoke", chromedp.Click(chromedp.CSS("#revoke-"+f.keyID)), chromedp.WaitVisible(chromedp.CSS(keyRow+`[data-revoked="true"]`)))
	revoked := time.Now()
	probe := client.New(f.base, f.key, client.WithMaxAttempts(1))
	waitFor(t, "the revoked key refused", func() bool {
		_, err := probe.GetOrder(context.Background(), f.orderNo)
		var apiErr *client.Error
		return errors.As(err, &apiErr) && apiErr.Status == 401
	})
	t.Logf("the revoked key was refused %v after the click", time.Since(revoked).Round(time.Millisecond))

	for _, p := range []string{"flagged", "settlements", "overview"} {
		b.run("page "+p, chromedp.Click(chromedp.CSS("#nav-"+p)), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-page=%q]`, p))))
	}
	b.run("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#signin-form")))
	b.run("the console after sign-out", chromedp.Navigate(f.base+"/console/orders"), chromedp.WaitVisible(chromedp.CSS("#signin-form")))

	// Late errors (a resource still loading) have had the time to arrive.
	time.Sleep(500 * time.Millisecond)
	if errs := b.errors(); len(errs) != 0 {
		t.Errorf("the pages raised %d errors:\n%q", len(errs), errs)
	}
}
