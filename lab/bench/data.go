package bench

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/orders"
)

// Names and values the benchmark's requests use.
const (
	merchantID  = "acme"
	apiKey      = "bench-acme-0123456789abcdef"
	provider    = "mockpay"
	amount      = 1999
	currency    = "EUR"
	callbackTTL = 72 * time.Hour // config.Defaults().CallbackTTL
	orderTTL    = 24 * time.Hour // config.Defaults().IdempotencyTTL
)

// Scopes as idempotency.CallbackScope and idempotency.MerchantScope make them.
const (
	callbackScope = "p:" + provider
	merchantScope = "m:" + merchantID
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newRand is a fast generator seeded from crypto/rand: ids must not repeat
// across runs against the same server, but need not be unpredictable.
func newRand() *rand.Rand {
	var seed [16]byte
	_, _ = crand.Read(seed[:])
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
}

func randomBase62(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = base62[r.IntN(len(base62))]
	}
	return string(b)
}

// txnID is a provider transaction id as mockpay makes them: "txn_" and 24
// random base62 characters.
func txnID(r *rand.Rand) string { return "txn_" + randomBase62(r, 24) }

// uuidV4 is a random RFC 9562 version 4 UUID, the usual Idempotency-Key.
func uuidV4(r *rand.Rand) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func randomHash(r *rand.Rand) []byte {
	b := make([]byte, 32)
	for i := 0; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// callbackKey is the derived key {provider}:{type}:{txn_id}.
func callbackKey(txn string) string { return provider + ":payment.succeeded:" + txn }

// callbackData is the canonical form of a payment.succeeded event's data
// (keys sorted), the callback's fingerprint input.
func callbackData(orderNo, txn string) []byte {
	return fmt.Appendf(nil, `{"amount":%d,"currency":%q,"order_no":%q,"txn_id":%q}`, amount, currency, orderNo, txn)
}

// callbackBody is a signed-callback body: {"type": ..., "data": {...}}.
func callbackBody(orderNo, txn string) []byte {
	return fmt.Appendf(nil, `{"type":"payment.succeeded","data":%s}`, callbackData(orderNo, txn))
}

// callbackResponse is the body paysvc stores and returns for an applied
// payment: {"result":"applied","order_no":...}.
func callbackResponse(orderNo string) []byte {
	return fmt.Appendf(nil, `{"result":"applied","order_no":%q}`, orderNo)
}

// orderResponse is the body of a 201 to POST /v1/orders, the service's
// own bytes.
func orderResponse(o orders.Order) []byte { return documents.Order(o) }

// sampleOrder is the new order whose response the storage section
// stores: a three-character merchant_order_no and no description.
func sampleOrder() orders.Order {
	now := time.Now().UTC().Truncate(time.Microsecond)
	return orders.Order{OrderNo: orders.NewOrderNo(), MerchantID: merchantID, MerchantOrderNo: "abc",
		Status: orders.Created, Amount: amount, Currency: currency, Version: 1, CreatedAt: now, UpdatedAt: now}
}

// orderRequestBody is a POST /v1/orders body.
func orderRequestBody(merchantOrderNo string) []byte {
	return fmt.Appendf(nil, `{"merchant_order_no":%q,"amount":%d,"currency":%q}`, merchantOrderNo, amount, currency)
}

// fingerprint stands in for the request hash of the raw baseline: the
// service hashes the canonical request; a SHA-256 of the body costs the same.
func fingerprint(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:8] // what a record keeps of it
}

// merchantOrderSeq numbers merchant_order_no values across the whole run:
// raw and service cells write the same orders table, whose unique key
// (merchant_id, merchant_order_no) they must never hit.
var merchantOrderSeq atomic.Int64

func nextMerchantOrderNo(prefix string) string {
	return fmt.Sprintf("%s%010d", prefix, merchantOrderSeq.Add(1))
}

// orderSupply is a pool of CREATED orders for payment callbacks to pay,
// created in bulk between cells so that no cell pays for creating them.
type orderSupply struct {
	raw    *sql.DB
	orders []string
	next   atomic.Int64
}

// take hands out the next unpaid order.
func (s *orderSupply) take() (string, bool) {
	i := s.next.Add(1) - 1
	if i >= int64(len(s.orders)) {
		return "", false
	}
	return s.orders[i], true
}

// ensure makes at least n unpaid orders available. It must not run while a
// cell takes orders.
func (s *orderSupply) ensure(ctx context.Context, n int) error {
	used := min(int(s.next.Load()), len(s.orders))
	s.orders = s.orders[used:]
	s.next.Store(0)
	missing := n - len(s.orders)
	if missing <= 0 {
		return nil
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	const chunk = 1000
	for missing > 0 {
		k := min(chunk, missing)
		var sb strings.Builder
		sb.WriteString(`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency,
			refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at) VALUES `)
		args := make([]any, 0, k*7)
		batch := make([]string, 0, k)
		for i := range k {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`(?, ?, ?, 'CREATED', ?, ?, 0, 0, '', 1, ?, ?, NULL)`)
			no := orders.NewOrderNo()
			batch = append(batch, no)
			args = append(args, no, merchantID, []byte(nextMerchantOrderNo("pre-")), amount, currency, now, now)
		}
		if _, err := s.raw.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("pre-create orders: %w", err)
		}
		s.orders = append(s.orders, batch...)
		missing -= k
	}
	return nil
}
