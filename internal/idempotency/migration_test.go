package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/db/dbtest"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/migrate"
)

// TestMigrationCarriesRecordsOver: records written in layout 1 (migration
// 000002) answer exactly as before once migrations 000006-000009 have
// moved them to layout 2: a finished key replays its stored response byte
// for byte and refuses another request, a held key is in flight, and an
// expired record is left behind.
func TestMigrationCarriesRecordsOver(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	ctx := context.Background()
	if err := migrate.Down(d.Config, 4); err != nil { // back to layout 1
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	order := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"amount":1000}`))
	callback := idempotency.DataFingerprint([]byte(`{"txn_id":"t1"}`))
	const (
		orderBody    = `{"order_no":"ord_01J0000000000000000000000A","status":"CREATED"}`
		callbackBody = `{"result":"applied","order_no":"ord_01J0000000000000000000000A"}`
	)
	v1 := []struct {
		scope, key         string
		hash               idempotency.Fingerprint
		status             int
		owner, leaseUntil  any
		respStatus, ctype  any
		location, body     any
		created, expiresAt time.Time
	}{
		{"m:acme", "order-1", order, 2, nil, nil, 201, 1, "/v1/orders/ord_01J0000000000000000000000A", orderBody,
			now.Add(-time.Hour), now.Add(23 * time.Hour)},
		{"p:mockpay", "mockpay:payment.succeeded:t1", callback, 2, nil, nil, 200, 1, nil, callbackBody,
			now.Add(-time.Hour), now.Add(71 * time.Hour)},
		{"m:acme", "held-1", order, 1, make([]byte, 16), now.Add(time.Minute), nil, nil, nil, nil,
			now, now.Add(24 * time.Hour)},
		{"m:acme", "expired-1", order, 2, nil, nil, 201, 1, nil, orderBody,
			now.Add(-25 * time.Hour), now.Add(-time.Hour)},
	}
	for _, r := range v1 {
		if _, err := db.Exec(ctx, d.Gorm, `INSERT INTO idempotency_records (scope, idem_key, request_hash, status,
			owner, lease_until, response_status, response_type, response_location, response_body, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.scope, r.key, r.hash[:], r.status, r.owner, r.leaseUntil,
			r.respStatus, r.ctype, r.location, r.body, r.created, r.expiresAt); err != nil {
			t.Fatalf("layout 1 row %s: %v", r.key, err)
		}
	}
	if err := migrate.Up(d.Config); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records"); n != 3 {
		t.Errorf("%d records after the upgrade, want the 3 live ones", n)
	}

	engine := idempotency.New(d.Gorm, idempotency.Options{Now: func() time.Time { return now }})
	executions := 0
	run := func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		executions++
		return idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{"new":true}`)}, nil
	}
	req := func(scope, key string, f idempotency.Fingerprint) idempotency.Request {
		return idempotency.Request{Scope: scope, Key: key, Fingerprint: f, TTL: 24 * time.Hour}
	}
	replays := []struct {
		req      idempotency.Request
		status   int
		location string
		body     string
	}{
		{req("m:acme", "order-1", order), 201, "/v1/orders/ord_01J0000000000000000000000A", orderBody},
		{req("p:mockpay", "mockpay:payment.succeeded:t1", callback), 200, "", callbackBody},
	}
	for _, w := range replays {
		res, err := engine.Do(ctx, w.req, run)
		if err != nil {
			t.Fatalf("%s: %v", w.req.Key, err)
		}
		got := res.Response
		if !res.Replayed() || got.Status != w.status || got.ContentType != "application/json" ||
			got.Location != w.location || !bytes.Equal(got.Body, []byte(w.body)) {
			t.Errorf("%s: %+v (%s), want the stored %d %q %s replayed", w.req.Key, got, got.Body, w.status, w.location, w.body)
		}
	}
	other := idempotency.RequestFingerprint("POST", "/v1/orders", []byte(`{"amount":2000}`))
	if _, err := engine.Do(ctx, req("m:acme", "order-1", other), run); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Errorf("another request under a carried-over key: %v, want ErrKeyReused", err)
	}
	if _, err := engine.Do(ctx, req("m:acme", "held-1", order), run); !errors.Is(err, idempotency.ErrInFlight) {
		t.Errorf("a carried-over held key: %v, want ErrInFlight", err)
	}
	if executions != 0 {
		t.Fatalf("%d executions for carried-over keys, want 0", executions)
	}
	if res, err := engine.Do(ctx, req("m:acme", "expired-1", order), run); err != nil || res.Outcome != idempotency.OutcomeFirst {
		t.Errorf("the expired key: %+v %v, want a first execution", res, err)
	}

	// And down again: layout 1 comes back, empty (its keys cannot be
	// recovered from their hashes).
	if err := migrate.Down(d.Config, 4); err != nil {
		t.Fatal(err)
	}
	if n := d.Count(t, "SELECT COUNT(*) FROM idempotency_records WHERE scope <> '' OR idem_key <> ''"); n != 0 {
		t.Errorf("%d records in layout 1 after going down, want 0", n)
	}
}
