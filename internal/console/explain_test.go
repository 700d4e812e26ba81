package console

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// explainRows is how many rows each table gets before the statements are
// explained and run: a million, almost all of them outside the range each
// statement asks for (other merchants', other orders', other days').
const explainRows = 1_000_000

// digits is 0 to 9; six of them joined count to a million on both
// servers (no sequence engine, no recursion limit).
const digits = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// seq numbers explainRows rows n, 1 to 1,000,000.
const seq = `SELECT 1 + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d + 100000*g.d AS n
  FROM ` + digits + ` a, ` + digits + ` b, ` + digits + ` c, ` + digits + ` e, ` + digits + ` f, ` + digits + ` g`

// seedForExplain fills every table the console reads with explainRows
// rows, dated before today.
func seedForExplain(t *testing.T, sqlDB *sql.DB) {
	t.Helper()
	const from = ` FROM (` + seq + `) s`
	const past = `'2025-06-01 00:00:00'`
	for _, q := range []string{
		`INSERT INTO merchants (merchant_id, name, created_at) SELECT CONCAT('m', LPAD(n, 7, '0')), '', ` + past + from,
		`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at)
		  SELECT CONCAT('ord_01H', LPAD(n, 23, '0')), CONCAT('m', LPAD(n % 50, 4, '0')), CONCAT('mo', n), IF(n % 3 = 0, 'PAID', 'CREATED'), 100, 'EUR', ` + past + `, ` + past + from,
		`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		  SELECT 'mockpay', CONCAT('txn', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 'SUCCEEDED', IF(n % 1000 = 0, 'duplicate_payment', 'applied'), 100, 'EUR', ` + past + `, ` + past + from,
		`INSERT INTO refunds (refund_no, order_no, merchant_id, merchant_refund_no, amount, status, created_at, updated_at)
		  SELECT CONCAT('rf_', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 'm0001', CONCAT('mr', n), 10, 'PENDING', ` + past + `, ` + past + from,
		`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
		  SELECT 'mockpay', 'payment', CONCAT('txn', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 100, 'EUR', ` + past + from,
		`INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, kind, payment_txn_id, amount, currency, created_at, updated_at)
		  SELECT CONCAT('pc_', n), 'mockpay', CONCAT('k', n), CONCAT('rf_', n), CONCAT('ord_01H', LPAD(n, 23, '0')), n % 2, CONCAT('txn', n), 10, 'EUR', ` + past + `, ` + past + from,
		`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, order_no)
		  SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), 'm0001', 'order.paid', ` + past + `, '{}', 2, CONCAT('ord_01H', LPAD(n, 23, '0'))` + from,
		`INSERT INTO event_attempts (event_id, at, status_code, duration_ms, endpoint_id)
		  SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), ` + past + `, 200, 5, ''` + from,
		`INSERT INTO webhook_endpoints (id, merchant_id, url, enabled_events, created_at)
		  SELECT CONCAT('we_01H', LPAD(n, 23, '0')), 'm0001', 'https://example.com/', '*', ` + past + from,
		// A thousand deliveries an endpoint, one in a hundred failed.
		`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status)
		  SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), CONCAT('we_01H', LPAD(n % 1000, 23, '0')), 'm0001', IF(n % 100 = 0, 3, 2)` + from,
		`INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at)
		  SELECT UNHEX(SHA2(n, 256)), CONCAT('key_', n), CONCAT('m', LPAD(n % 10000 + 1, 7, '0')), 'sk_abcd', ` + past + from,
		`INSERT INTO settlements (merchant_id, settle_date, currency, payments_count, payments_amount, refunds_count, refunds_amount, net, created_at)
		  SELECT CONCAT('m', LPAD(n % 50, 4, '0')), DATE_SUB('2026-01-01', INTERVAL n DIV 50 DAY), 'EUR', 1, 1, 0, 0, 1, ` + past + from,
		`INSERT INTO console_sessions (token_hash, created_at, expires_at)
		  SELECT UNHEX(SHA2(n, 256)), NOW(6), DATE_ADD(NOW(6), INTERVAL n MINUTE)` + from,
	} {
		if _, err := sqlDB.Exec(q); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	for _, tb := range []string{"merchants", "orders", "payments", "refunds", "ledger_entries", "provider_calls", "events",
		"event_attempts", "webhook_endpoints", "deliveries", "api_keys", "settlements", "console_sessions"} {
		if _, err := sqlDB.Exec(`ANALYZE TABLE ` + tb); err != nil {
			t.Fatal(err)
		}
	}
}

// maxRowsRead bounds what one statement of the console may read (the
// server's Handler_read_* counters of its session): its page or batch,
// at most a thousand, and what it counts; never the table.
const maxRowsRead = 3000

// TestQueriesUseTheirIndexes explains every statement of the console on
// tables of a million rows and runs it: each reads the index named, by a
// range or a lookup, never a table scan, and reads at most maxRowsRead.
// The reads it borrows (requestlog.ForOrder and Counts, events.ForOrder
// and Pending, payments.ListFlagged, reconcile.LastRun) are held to
// theirs where they are defined.
func TestQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	sqlDB, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	seedForExplain(t, sqlDB)
	now := time.Now().UTC()
	hash := make([]byte, 32)
	order := "ord_01H" + strings.Repeat("0", 20) + "100"
	two := placeholders(2)
	for _, tc := range []struct {
		name, q, key string
		args         []any
	}{
		{"session", fmt.Sprintf(qSession, two), "PRIMARY", []any{hash, hash, now}},
		{"session purge", qSessionPurge, "idx_console_sessions_expires", []any{now, 100}},
		{"orders today", qOrdersToday, "PRIMARY", []any{orderNoAt(now)}},
		{"flagged count", qFlaggedCount, "idx_payments_flagged", flaggedArgs()},
		{"order by number", qOrderByNo, "PRIMARY", []any{order}},
		{"order by merchant_order_no", qOrderByMerchantNo, "uk_orders_merchant_order", []any{"m0001", []byte("mo1")}},
		{"order by merchant_order_no, merchants in a batch", fmt.Sprintf(qOrdersByMerchantNo, two), "uk_orders_merchant_order", []any{"m0001", "m0002", []byte("mo1")}},
		{"merchants in a batch", qMerchantIDs, "PRIMARY", []any{"", merchantBatch}},
		{"orders of a merchant", qOrdersOfMerchant, "uk_orders_merchant_order", []any{"m0001", []byte(""), PageSize + 1}},
		{"newest orders", qOrdersNewest, "PRIMARY", []any{"ord_~", PageSize + 1}},
		{"payments of an order", qPaymentsOfOrder, "idx_payments_order", []any{order, timelineCap}},
		{"refunds of an order", qRefundsOfOrder, "idx_refunds_order", []any{order, timelineCap}},
		{"ledger of an order", qLedgerOfOrder, "idx_ledger_order", []any{order, timelineCap}},
		{"calls of refunds", fmt.Sprintf(qCallsOfRefunds, two), "idx_provider_calls_refund", []any{"rf_1", "rf_2", timelineCap}},
		{"automatic refunds of payments", fmt.Sprintf(qCallsOfPayments, "kind = 1 AND ((provider = ? AND payment_txn_id = ?) OR (provider = ? AND payment_txn_id = ?))"),
			"idx_provider_calls_payment", []any{"mockpay", []byte("txn1"), "mockpay", []byte("txn3"), timelineCap}},
		{"deliveries of events", fmt.Sprintf(qDeliveriesOf, two), "uk_deliveries_pair", []any{"evt_01H" + strings.Repeat("0", 22) + "1", "evt_01H" + strings.Repeat("0", 22) + "2", timelineCap}},
		{"attempts of events", fmt.Sprintf(qAttemptsOf, two), "PRIMARY", []any{"evt_01H" + strings.Repeat("0", 22) + "1", "evt_01H" + strings.Repeat("0", 22) + "2", timelineCap}},
		{"last attempts of deliveries", lastAttemptsOf(2), "PRIMARY", []any{"evt_01H" + strings.Repeat("0", 22) + "1", "", "evt_01H" + strings.Repeat("0", 22) + "2", ""}},
		{"failed deliveries of an endpoint", qFailedOfEndpoint, "idx_deliveries_endpoint", []any{"we_01H" + strings.Repeat("0", 22) + "1", "", PageSize + 1}},
		{"next endpoint", qNextEndpoint, "PRIMARY", []any{""}},
		{"events by id", fmt.Sprintf(qEventsByID, two), "PRIMARY", []any{"evt_a", "evt_b"}},
		{"event's merchant", qEventMerchant, "PRIMARY", []any{"evt_01H" + strings.Repeat("0", 22) + "1"}},
		{"endpoints", qEndpoints, "PRIMARY", []any{"", PageSize + 1}},
		{"endpoint counts", fmt.Sprintf(qEndpointCounts, two), "idx_deliveries_endpoint", []any{"we_01H" + strings.Repeat("0", 22) + "1", "we_01H" + strings.Repeat("0", 22) + "2"}},
		{"endpoint's merchant", qEndpointOwner, "PRIMARY", []any{"we_01H" + strings.Repeat("0", 22) + "1"}},
		{"merchants", qMerchants, "PRIMARY", []any{"", PageSize + 1}},
		{"keys of merchants", fmt.Sprintf(qKeysOf, two), "idx_api_keys_merchant", []any{"m0000001", "m0000002", maxKeysPerPage}},
		{"newest keys of a merchant", qKeysNewest, "idx_api_keys_merchant", []any{"m0000001", maxKeysPerPage}},
		{"settlements of a day", qSettlementDay, "idx_settlements_date", []any{"2025-12-30", "", "", "", PageSize + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := sqlDB.Query("EXPLAIN "+tc.q, tc.args...)
			if err != nil {
				t.Fatalf("EXPLAIN: %v\n%s", err, tc.q)
			}
			defer rows.Close()
			cols, _ := rows.Columns()
			n := 0
			for rows.Next() {
				vals := make([]sql.NullString, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				row := map[string]string{}
				for i, c := range cols {
					row[strings.ToLower(c)] = vals[i].String
				}
				n++
				// A lookup of a primary or unique key that finds nothing
				// is settled before the plan: no access type is shown.
				if row["type"] == "" && strings.Contains(row["extra"], "const table") {
					continue
				}
				if row["type"] == "ALL" || row["type"] == "index" || row["key"] != tc.key {
					t.Errorf("plan reads %s by %q (type %s, %s), want a range or lookup of %s\n%s",
						row["table"], row["key"], row["type"], row["extra"], tc.key, tc.q)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Errorf("no plan")
			}
			read := d.RowsRead(t, func(pool *gorm.DB) {
				// As the console sends it: through database/sql, whose
				// driver binds a []byte as one value (gorm's Raw would
				// expand it into a list).
				rows, err := pool.Statement.ConnPool.QueryContext(context.Background(), tc.q, tc.args...)
				if err != nil {
					t.Fatalf("%v\n%s", err, tc.q)
				}
				defer rows.Close()
				for rows.Next() {
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("%d index entries and rows read", read)
			if read > maxRowsRead {
				t.Errorf("read %d index entries and rows of tables of %d: not its range\n%s", read, explainRows, tc.q)
			}
		})
	}
}
