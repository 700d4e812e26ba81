package httpapi_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/endpoints"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/internal/netguard"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/outbox"
	"github.com/paysvc/paysvc/internal/webhooks"
	"github.com/paysvc/paysvc/lab/kit/poll"
)

// hostileTLS is a receiver whose certificate names hosts of control
// characters: every attempt fails its handshake with an error that quotes
// them, 255 characters stored, each written \u0001 (6 bytes) in JSON.
func hostileTLS(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hostile"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{strings.Repeat("\x01", 300)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
}

// An event whose every delivery (16 API endpoints and the operator's)
// failed on receivers whose failures quote what they control: the answer
// of its redelivery, which embeds the latest attempts of the event and of
// each delivery, still fits a stored response, so the redelivery is
// answered 202 (not 500, for every redelivery of the event after).
func TestRedeliverAnswerFitsWhateverReceiversSay(t *testing.T) {
	t.Parallel()
	e := weNew(t, nil)
	hostile := hostileTLS(t)
	for i := range endpoints.MaxPerMerchant {
		wantStatus(t, "create", e.create(t, fmt.Sprintf("we-h%d", i), fmt.Sprintf(`{"url":"%s/hook-%d"}`, hostile, i)), 201, "")
	}
	now := time.Now().UTC()
	o := orders.Order{OrderNo: "ord_hostile", MerchantID: "acme", MerchantOrderNo: "h1", Status: orders.Closed,
		Amount: 100, Currency: "EUR", Version: 2, CreatedAt: now, UpdatedAt: now}
	if err := events.NewRecorder(nil).OrderClosed(context.Background(), e.db.Gorm, o, events.ReasonCancelled); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := e.db.Gorm.Raw(`SELECT MAX(id) FROM events`).Scan(&id).Error; err != nil {
		t.Fatal(err)
	}

	secret, err := webhooks.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := endpoints.NewKeyring(bytes.Repeat([]byte{1}, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := db.OpenPool(db.BackgroundConfig(e.db.Config), 4)
	if err != nil {
		t.Fatal(err)
	}
	n := events.NewNotifier(map[string]events.Endpoint{"acme": {URL: hostile + "/env", Secrets: []webhooks.Secret{secret}}},
		netguard.Rule{AllowPrivate: true, AllowHTTP: true}, 32, nil)
	delays := make([]time.Duration, 6)
	for i := range delays {
		delays[i] = 10 * time.Millisecond
	}
	r := outbox.New(events.NewQueue(pool, events.QueueOptions{Notified: n.Notifies, Keys: keys}), n.Deliver,
		outbox.Options{Timeout: 5 * time.Second, Schedule: outbox.Schedule{Delays: delays}, Poll: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			_ = db.Close(pool)
		}
	}
	t.Cleanup(stop)
	const deliveries = endpoints.MaxPerMerchant + 1
	if !poll.Until(time.Minute, 20*time.Millisecond, func() bool {
		return e.db.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 3`) == deliveries
	}) {
		t.Fatalf("%d of %d deliveries failed after a minute", e.db.Count(t, `SELECT COUNT(*) FROM deliveries WHERE status = 3`), deliveries)
	}
	stop()
	if got := e.db.Count(t, `SELECT COUNT(*) FROM event_attempts WHERE CHAR_LENGTH(error) = 255`); got < deliveries*events.EmbeddedPerDelivery {
		t.Fatalf("%d attempts with a full error, want at least %d", got, deliveries*events.EmbeddedPerDelivery)
	}

	r1 := e.do(t, ctAcmeKey, "POST", "/v1/events/"+id+"/redeliver", "rd-hostile", "")
	wantStatus(t, "redeliver", r1, 202, "")
	r2 := e.do(t, ctAcmeKey, "POST", "/v1/events/"+id+"/redeliver", "rd-hostile", "")
	if r2.status != 202 || !bytes.Equal(r1.body, r2.body) {
		t.Errorf("retry of the redelivery: %d, %d bytes, want the stored 202 of %d bytes", r2.status, len(r2.body), len(r1.body))
	}
}
