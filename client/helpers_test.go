package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/paysvc/paysvc/client"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
	"github.com/paysvc/paysvc/lab/mockpay"
)

// uniq is a fresh name with prefix: tests share the service's merchant.
func uniq(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// orderReq is a valid order of 1999 EUR.
func orderReq(merchantOrderNo string) client.CreateOrderRequest {
	return client.CreateOrderRequest{MerchantOrderNo: merchantOrderNo, Amount: 1999, Currency: "EUR", Description: "client test"}
}

// ordersOf counts the orders stored with merchantOrderNo.
func ordersOf(t testing.TB, d *dbtest.DB, merchantOrderNo string) int64 {
	t.Helper()
	return d.Count(t, "SELECT COUNT(*) FROM orders WHERE merchant_order_no = ?", merchantOrderNo)
}

// pay has the provider report o paid, as its signed callback does.
func pay(t testing.TB, baseURL string, o *client.Order) {
	t.Helper()
	secret, err := webhooks.ParseSecret(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mockpay.NewSender(mockpay.Config{URL: baseURL + "/v1/callbacks/" + provider, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	status, body, err := s.SendOne(context.Background(), mockpay.PaymentSucceeded(o.OrderNo, mockpay.NewTxnID(), o.Amount, o.Currency))
	if err != nil || status != http.StatusOK {
		t.Fatalf("pay %s: %d %s %v", o.OrderNo, status, body, err)
	}
}

// recorder keeps a call's attempts.
type recorder struct {
	mu       sync.Mutex
	attempts []client.Attempt
}

func (r *recorder) add(a client.Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, a)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = nil
}

func (r *recorder) all() []client.Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]client.Attempt(nil), r.attempts...)
}

// answerDropper is a TCP proxy that loses the answer of the first
// connection: it forwards the request, waits for the first byte of the
// answer (so the service has committed), then closes both sides without
// passing it on. Later connections pass through.
type answerDropper struct {
	ln     net.Listener
	target string
	conns  atomic.Int32
}

func newAnswerDropper(t testing.TB, targetURL string) *answerDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := targetURL[len("http://"):]
	p := &answerDropper{ln: ln, target: host}
	go p.accept()
	t.Cleanup(func() { _ = ln.Close() })
	return p
}

func (p *answerDropper) URL() string { return "http://" + p.ln.Addr().String() }

func (p *answerDropper) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c, p.conns.Add(1) == 1)
	}
}

func (p *answerDropper) serve(c net.Conn, drop bool) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		_, _ = io.Copy(s, c)
		_ = s.Close()
	}()
	if drop {
		_, _ = io.ReadAtLeast(s, make([]byte, 1), 1)
		return
	}
	_, _ = io.Copy(c, s)
}
