package console

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/payments"
)

// The console's statements. Each reads a range of the index it names (the
// EXPLAIN test holds them to it), and every list pages by keyset: the
// next page starts after the last row's key, never at an OFFSET.
const (
	qSession       = `SELECT expires_at FROM console_sessions WHERE token_hash IN (%s) AND expires_at > ?`
	qSessionInsert = `INSERT INTO console_sessions (token_hash, created_at, expires_at) VALUES (?, ?, ?)`
	qSessionDelete = `DELETE FROM console_sessions WHERE token_hash IN (%s)`
	qSessionPurge  = `DELETE FROM console_sessions WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`

	// Order numbers are "ord_" + ULID, time-ordered: today's orders are a
	// range of the primary key.
	qOrdersToday  = `SELECT status, COUNT(*) FROM orders WHERE order_no >= ? GROUP BY status`
	qFlaggedCount = `SELECT COUNT(*) FROM payments FORCE INDEX (idx_payments_flagged) WHERE result IN (?, ?, ?) AND status = 'SUCCEEDED'`

	orderColumns        = `order_no, merchant_id, merchant_order_no, status, amount, currency, refunded_amount, pending_refund_amount, created_at, updated_at, paid_at`
	qOrderByNo          = `SELECT ` + orderColumns + ` FROM orders WHERE order_no = ?`
	qOrderByMerchantNo  = `SELECT ` + orderColumns + ` FROM orders WHERE merchant_id = ? AND merchant_order_no = ?`
	qOrdersByMerchantNo = `SELECT ` + orderColumns + ` FROM orders FORCE INDEX (uk_orders_merchant_order) WHERE merchant_id IN (%s) AND merchant_order_no = ?`
	qMerchantIDs        = `SELECT merchant_id FROM merchants WHERE merchant_id > ? ORDER BY merchant_id LIMIT ?`
	qOrdersOfMerchant   = `SELECT ` + orderColumns + ` FROM orders FORCE INDEX (uk_orders_merchant_order) WHERE merchant_id = ? AND merchant_order_no > ? ORDER BY merchant_order_no LIMIT ?`
	qOrdersNewest       = `SELECT ` + orderColumns + ` FROM orders WHERE order_no < ? ORDER BY order_no DESC LIMIT ?`

	qPaymentsOfOrder = `SELECT id, provider, txn_id, status, result, amount, currency, created_at FROM payments WHERE order_no = ? ORDER BY id LIMIT ?`
	qRefundsOfOrder  = `SELECT refund_no, merchant_refund_no, amount, status, created_at, updated_at FROM refunds WHERE order_no = ? ORDER BY refund_no LIMIT ?`
	qLedgerOfOrder   = `SELECT id, provider, kind, txn_id, amount, currency, created_at FROM ledger_entries WHERE order_no = ? ORDER BY id LIMIT ?`
	callColumns      = `id, provider, kind, refund_no, payment_txn_id, amount, currency, status, retries, COALESCE(settled, ''), last_error, created_at, updated_at`
	qCallsOfRefunds  = `SELECT ` + callColumns + ` FROM provider_calls WHERE refund_no IN (%s) LIMIT ?`
	qCallsOfPayments = `SELECT ` + callColumns + ` FROM provider_calls WHERE %s LIMIT ?`
	qDeliveriesOf    = `SELECT event_id, endpoint_id, status FROM deliveries WHERE event_id IN (%s) ORDER BY event_id, endpoint_id LIMIT ?`
	qAttemptsOf      = `SELECT event_id, endpoint_id, at, status_code, error, duration_ms FROM event_attempts WHERE event_id IN (%s) ORDER BY event_id, id LIMIT ?`
	// qLastAttemptOf is one delivery's last attempt: its event's attempts
	// read from the newest back to the first to its endpoint.
	qLastAttemptOf = `(SELECT event_id, endpoint_id, at, status_code, error, duration_ms FROM event_attempts WHERE event_id = ? AND endpoint_id = ? ORDER BY id DESC LIMIT 1)`

	qFailedOfEndpoint = `SELECT id, event_id, endpoint_id, merchant_id, retries FROM deliveries FORCE INDEX (idx_deliveries_endpoint)
		WHERE endpoint_id = ? AND status = 3 AND event_id > ? ORDER BY event_id LIMIT ?`
	qNextEndpoint   = `SELECT id FROM webhook_endpoints WHERE id > ? ORDER BY id LIMIT 1`
	qEventsByID     = `SELECT id, type, order_no, created_at FROM events WHERE id IN (%s)`
	qEventMerchant  = `SELECT merchant_id FROM events WHERE id = ?`
	qEndpoints      = `SELECT id, merchant_id, url, status, COALESCE(disabled_reason, ''), failing_since, created_at FROM webhook_endpoints WHERE id > ? ORDER BY id LIMIT ?`
	qEndpointCounts = `SELECT endpoint_id, status, COUNT(*) FROM deliveries FORCE INDEX (idx_deliveries_endpoint) WHERE endpoint_id IN (%s) AND status IN (1, 3) GROUP BY endpoint_id, status`
	qEndpointOwner  = `SELECT merchant_id FROM webhook_endpoints WHERE id = ?`

	qMerchants     = `SELECT merchant_id, name, created_at FROM merchants WHERE merchant_id > ? ORDER BY merchant_id LIMIT ?`
	qKeysOf        = `SELECT id, merchant_id, prefix, created_at, expires_at, revoked_at, last_used_at FROM api_keys FORCE INDEX (idx_api_keys_merchant) WHERE merchant_id IN (%s) ORDER BY merchant_id, id LIMIT ?`
	qKeysNewest    = `SELECT id, merchant_id, prefix, created_at, expires_at, revoked_at, last_used_at FROM api_keys FORCE INDEX (idx_api_keys_merchant) WHERE merchant_id = ? ORDER BY id DESC LIMIT ?`
	qSettlementDay = `SELECT merchant_id, currency, payments_count, payments_amount, refunds_count, refunds_amount, net FROM settlements FORCE INDEX (idx_settlements_date)
		WHERE settle_date = ? AND (merchant_id > ? OR (merchant_id = ? AND currency > ?)) ORDER BY merchant_id, currency LIMIT ?`
)

// timelineCap bounds each kind of row an order's timeline shows besides
// its requests (which page): an order has a handful of each, and a cap
// keeps a pathological one from making the page unbounded.
const timelineCap = 200

// page cuts a keyset read of PageSize+1 rows to a page, with the cursor
// of the next ("" on the last page): the last row's key.
func page[T any](rows []T, key func(T) string) ([]T, string) {
	if len(rows) <= PageSize {
		return rows, ""
	}
	return rows[:PageSize], key(rows[PageSize-1])
}

// indexed is the keys of rows, for a query IN (...) over them, and where
// each key stands in rows, to hang what that query reads on its row.
func indexed[T any](rows []T, key func(T) string) (keys []string, at map[string]int) {
	keys, at = make([]string, len(rows)), make(map[string]int, len(rows))
	for i, r := range rows {
		keys[i] = key(r)
		at[keys[i]] = i
	}
	return keys, at
}

func scanString(rows *sql.Rows) (s string, err error) {
	err = rows.Scan(&s)
	return s, err
}

// ascii reports whether every s is ASCII. The identifiers the console
// looks up and pages by are ASCII columns, and the server refuses to
// compare one with a value that is not (an illegal mix of collations, or
// bytes that are no UTF-8): such a value can match no row, so the read is
// not sent.
func ascii(ss ...string) bool {
	for _, s := range ss {
		for i := 0; i < len(s); i++ {
			if s[i] >= utf8.RuneSelf {
				return false
			}
		}
	}
	return true
}

// lastAttemptsOf is the last attempt of each of n deliveries, one
// statement: qLastAttemptOf for each, with its event and endpoint.
func lastAttemptsOf(n int) string {
	return strings.TrimSuffix(strings.Repeat(qLastAttemptOf+" UNION ALL ", n), " UNION ALL ")
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// orderNoAt is the smallest order number created at t or later.
func orderNoAt(t time.Time) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		return "ord_"
	}
	return "ord_" + id.String()
}

// Order is one row of orders.
type Order struct {
	OrderNo, MerchantID, MerchantOrderNo, Status, Currency string
	Amount, Refunded, PendingRefund                        int64
	CreatedAt, UpdatedAt, PaidAt                           time.Time
}

func scanOrder(rows *sql.Rows) (Order, error) {
	var (
		o    Order
		mno  []byte
		paid sql.NullTime
	)
	err := rows.Scan(&o.OrderNo, &o.MerchantID, &mno, &o.Status, &o.Amount, &o.Currency, &o.Refunded, &o.PendingRefund,
		&o.CreatedAt, &o.UpdatedAt, &paid)
	o.MerchantOrderNo, o.PaidAt = string(mno), paid.Time
	return o, err
}

// OrderSearch is what the orders page looks for: one order by either
// number, a merchant's orders, or the newest orders; After is the cursor.
type OrderSearch struct {
	OrderNo, MerchantOrderNo, Merchant, After string
}

// searchOrders returns at most PageSize orders and the next page's
// cursor ("" on the last page).
func searchOrders(ctx context.Context, gdb *gorm.DB, s OrderSearch) ([]Order, string, error) {
	var (
		os  []Order
		err error
	)
	if !ascii(s.OrderNo, s.Merchant) || (s.Merchant == "" && !ascii(s.After)) {
		return nil, "", nil
	}
	switch {
	case s.OrderNo != "":
		os, err = db.QueryAll(ctx, gdb, scanOrder, qOrderByNo, s.OrderNo)
	case s.MerchantOrderNo != "" && s.Merchant != "":
		os, err = db.QueryAll(ctx, gdb, scanOrder, qOrderByMerchantNo, s.Merchant, []byte(s.MerchantOrderNo))
	case s.MerchantOrderNo != "":
		os, err = byMerchantOrderNo(ctx, gdb, s.MerchantOrderNo)
	case s.Merchant != "":
		os, err = db.QueryAll(ctx, gdb, scanOrder, qOrdersOfMerchant, s.Merchant, []byte(s.After), PageSize+1)
		if err == nil {
			os, next := page(os, func(o Order) string { return o.MerchantOrderNo })
			return os, next, nil
		}
	default:
		after := s.After
		if after == "" {
			after = "ord_~" // above every ULID
		}
		os, err = db.QueryAll(ctx, gdb, scanOrder, qOrdersNewest, after, PageSize+1)
		if err == nil {
			os, next := page(os, func(o Order) string { return o.OrderNo })
			return os, next, nil
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("search orders: %w", err)
	}
	return os, "", nil
}

// merchantBatch is the merchants one lookup of a merchant_order_no
// covers.
const merchantBatch = 500

// byMerchantOrderNo finds the orders of every merchant that used a
// merchant_order_no: a merchant_order_no is unique per merchant only, and
// its index leads with the merchant, so the merchants are read in batches
// (a range of their primary key) and each batch is one lookup per merchant
// in uk_orders_merchant_order. At most one order per merchant matches.
func byMerchantOrderNo(ctx context.Context, gdb *gorm.DB, mno string) ([]Order, error) {
	var out []Order
	after := ""
	for {
		ids, err := db.QueryAll(ctx, gdb, scanString, qMerchantIDs, after, merchantBatch)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return out, nil
		}
		os, err := db.QueryAll(ctx, gdb, scanOrder, fmt.Sprintf(qOrdersByMerchantNo, placeholders(len(ids))), append(anys(ids), []byte(mno))...)
		if err != nil {
			return nil, err
		}
		out = append(out, os...)
		if len(ids) < merchantBatch || len(out) >= PageSize {
			return out, nil
		}
		after = ids[len(ids)-1]
	}
}

// Overview is the overview page's figures.
type Overview struct {
	Since         time.Time
	OrdersToday   map[string]int64
	OrdersTotal   int64
	Flagged       int64
	OutboxPending int64
	OutboxOldest  time.Time
}

func ordersToday(ctx context.Context, gdb *gorm.DB, since time.Time) (map[string]int64, int64, error) {
	out := map[string]int64{}
	var total int64
	err := db.EachRow(ctx, gdb, func(rows *sql.Rows) error {
		var (
			st string
			n  int64
		)
		if err := rows.Scan(&st, &n); err != nil {
			return err
		}
		out[st] = n
		total += n
		return nil
	}, qOrdersToday, orderNoAt(since))
	if err != nil {
		return nil, 0, fmt.Errorf("orders today: %w", err)
	}
	return out, total, nil
}

// flaggedArgs are the results of payments.FlaggedResults, the flagged
// payments' definition, as arguments.
func flaggedArgs() []any {
	out := make([]any, len(payments.FlaggedResults))
	for i, r := range payments.FlaggedResults {
		out[i] = string(r)
	}
	return out
}

func flaggedCount(ctx context.Context, gdb *gorm.DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, gdb, qFlaggedCount, flaggedArgs()...).Scan(&n); err != nil {
		return 0, fmt.Errorf("flagged payments: %w", err)
	}
	return n, nil
}

// Call is one row of provider_calls.
type Call struct {
	ID, Provider, RefundNo, PaymentTxnID, Currency, Settled, LastError string
	Kind, Status, Retries                                              int
	Amount                                                             int64
	CreatedAt, UpdatedAt                                               time.Time
}

// StatusName is the call's status in a word.
func (c Call) StatusName() string {
	switch c.Status {
	case 0:
		return "pending"
	case 1:
		return "done"
	}
	return "failed"
}

func readCalls(ctx context.Context, gdb *gorm.DB, q string, args ...any) ([]Call, error) {
	cs, err := db.QueryAll(ctx, gdb, scanCall, q, args...)
	if err != nil {
		return nil, fmt.Errorf("provider calls: %w", err)
	}
	return cs, nil
}

func scanCall(rows *sql.Rows) (Call, error) {
	var (
		c   Call
		txn []byte
	)
	err := rows.Scan(&c.ID, &c.Provider, &c.Kind, &c.RefundNo, &txn, &c.Amount, &c.Currency, &c.Status, &c.Retries,
		&c.Settled, &c.LastError, &c.CreatedAt, &c.UpdatedAt)
	c.PaymentTxnID = string(txn)
	return c, err
}

// Merchant is a merchant with its keys.
type Merchant struct {
	ID, Name  string
	CreatedAt time.Time
	Keys      []Key
	// KeysCut: the merchant has more than maxKeysPerPage keys, and Keys
	// holds the newest of them.
	KeysCut bool
}

// Key is what the console shows of an API key: its id and prefix, never
// more (the key itself is not stored).
type Key struct {
	ID, Prefix                                string
	CreatedAt, ExpiresAt, RevokedAt, LastUsed time.Time
}

// maxKeysPerPage bounds the keys one page of merchants shows.
const maxKeysPerPage = 1000

// merchantsList reads a page of merchants with all their keys. Keys are
// read in one range of idx_api_keys_merchant over the page's merchants,
// oldest first, bounded by maxKeysPerPage; when the bound cuts the range,
// the page ends at the last merchant whose keys were all read, so a
// merchant's keys are never shown in part and the merchants after it come
// on the next page instead of showing none. A merchant with more keys than
// the bound is a page of its own, showing its newest keys: those in use,
// the ones an operator comes to revoke, and not its oldest, long retired.
func merchantsList(ctx context.Context, gdb *gorm.DB, after string) ([]Merchant, string, error) {
	if !ascii(after) {
		return nil, "", nil
	}
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (m Merchant, err error) {
		err = rows.Scan(&m.ID, &m.Name, &m.CreatedAt)
		return m, err
	}, qMerchants, after, PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("merchants: %w", err)
	}
	out, next := page(out, func(m Merchant) string { return m.ID })
	if len(out) == 0 {
		return out, next, nil
	}
	ids, at := indexed(out, func(m Merchant) string { return m.ID })
	keys, err := readKeys(ctx, gdb, fmt.Sprintf(qKeysOf, placeholders(len(ids))), append(anys(ids), maxKeysPerPage+1)...)
	if err != nil {
		return nil, "", err
	}
	if len(keys) > maxKeysPerPage {
		// The merchant of the row past the bound may have more keys than
		// were read; the merchants before it have all theirs.
		cut := at[keys[maxKeysPerPage].merchant]
		if cut == 0 {
			out = out[:1]
			newest, err := readKeys(ctx, gdb, qKeysNewest, out[0].ID, maxKeysPerPage)
			if err != nil {
				return nil, "", err
			}
			slices.Reverse(newest)
			keys, out[0].KeysCut = newest, true
		} else {
			out = out[:cut]
		}
		next = out[len(out)-1].ID
	}
	for _, k := range keys {
		if i, ok := at[k.merchant]; ok && i < len(out) {
			out[i].Keys = append(out[i].Keys, k.Key)
		}
	}
	return out, next, nil
}

// merchantKey is a key read with its merchant.
type merchantKey struct {
	Key
	merchant string
}

func readKeys(ctx context.Context, gdb *gorm.DB, q string, args ...any) ([]merchantKey, error) {
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (k merchantKey, err error) {
		var expires, revoked, used sql.NullTime
		err = rows.Scan(&k.ID, &k.merchant, &k.Prefix, &k.CreatedAt, &expires, &revoked, &used)
		k.ExpiresAt, k.RevokedAt, k.LastUsed = expires.Time, revoked.Time, used.Time
		return k, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	return out, nil
}

// Settlement is one row of a day's settlements.
type Settlement struct {
	MerchantID, Currency                                            string
	PaymentsCount, PaymentsAmount, RefundsCount, RefundsAmount, Net int64
}

// settlementsOf reads a day's rows after (merchant, currency).
func settlementsOf(ctx context.Context, gdb *gorm.DB, day time.Time, afterMerchant, afterCurrency string) ([]Settlement, string, error) {
	if !ascii(afterMerchant, afterCurrency) {
		return nil, "", nil
	}
	out, err := db.QueryAll(ctx, gdb, func(rows *sql.Rows) (s Settlement, err error) {
		err = rows.Scan(&s.MerchantID, &s.Currency, &s.PaymentsCount, &s.PaymentsAmount, &s.RefundsCount, &s.RefundsAmount, &s.Net)
		return s, err
	}, qSettlementDay, day.Format(time.DateOnly), afterMerchant, afterMerchant, afterCurrency, PageSize+1)
	if err != nil {
		return nil, "", fmt.Errorf("settlements of %s: %w", day.Format(time.DateOnly), err)
	}
	out, next := page(out, func(s Settlement) string { return s.MerchantID + " " + s.Currency })
	return out, next, nil
}
