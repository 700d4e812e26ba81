package console

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// explainRows is how many rows each table gets before the statements are
// explained: enough that a full scan costs the optimizer more than the
// index, as it does in production. A run on millions of rows would say
// the same with more confidence; this one holds each statement to its
// index.
const explainRows = 1000

// seedForExplain fills every table the console reads with explainRows
// rows (a recursive CTE counts: MySQL 8 and MariaDB alike, under
// MySQL's default recursion depth of 1000).
func seedForExplain(t *testing.T, sqlDB *sql.DB) {
	t.Helper()
	const seq = `WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1000) `
	for _, q := range []string{
		`INSERT INTO merchants (merchant_id, name, created_at) ` + seq + `SELECT CONCAT('m', LPAD(n, 4, '0')), '', NOW(6) FROM s`,
		`INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency, created_at, updated_at) ` + seq +
			`SELECT CONCAT('ord_01H', LPAD(n, 23, '0')), CONCAT('m', LPAD(n % 50, 4, '0')), CONCAT('mo', n), IF(n % 3 = 0, 'PAID', 'CREATED'), 100, 'EUR', NOW(6), NOW(6) FROM s`,
		`INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at) ` + seq +
			`SELECT 'mockpay', CONCAT('txn', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 'SUCCEEDED', IF(n % 100 = 0, 'duplicate_payment', 'applied'), 100, 'EUR', NOW(6), NOW(6) FROM s`,
		`INSERT INTO refunds (refund_no, order_no, merchant_id, merchant_refund_no, amount, status, created_at, updated_at) ` + seq +
			`SELECT CONCAT('rf_', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 'm0001', CONCAT('mr', n), 10, 'PENDING', NOW(6), NOW(6) FROM s`,
		`INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at) ` + seq +
			`SELECT 'mockpay', 'payment', CONCAT('txn', n), CONCAT('ord_01H', LPAD(n, 23, '0')), 100, 'EUR', NOW(6) FROM s`,
		`INSERT INTO provider_calls (id, provider, idem_key, refund_no, order_no, kind, payment_txn_id, amount, currency, created_at, updated_at) ` + seq +
			`SELECT CONCAT('pc_', n), 'mockpay', CONCAT('k', n), CONCAT('rf_', n), CONCAT('ord_01H', LPAD(n, 23, '0')), n % 2, CONCAT('txn', n), 10, 'EUR', NOW(6), NOW(6) FROM s`,
		`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, order_no) ` + seq +
			`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), 'm0001', 'order.paid', NOW(6), '{}', 2, CONCAT('ord_01H', LPAD(n, 23, '0')) FROM s`,
		`INSERT INTO event_attempts (event_id, at, status_code, duration_ms, endpoint_id) ` + seq +
			`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), NOW(6), 200, 5, '' FROM s`,
		`INSERT INTO webhook_endpoints (id, merchant_id, url, enabled_events, created_at) ` + seq +
			`SELECT CONCAT('we_01H', LPAD(n, 23, '0')), 'm0001', 'https://example.com/', '*', NOW(6) FROM s`,
		`INSERT INTO deliveries (event_id, endpoint_id, merchant_id, status) ` + seq +
			`SELECT CONCAT('evt_01H', LPAD(n, 23, '0')), CONCAT('we_01H', LPAD(n % 40, 23, '0')), 'm0001', IF(n % 10 = 0, 3, 2) FROM s`,
		`INSERT INTO api_keys (key_hash, id, merchant_id, prefix, created_at) ` + seq +
			`SELECT UNHEX(SHA2(n, 256)), CONCAT('key_', n), CONCAT('m', LPAD(n % 100 + 1, 4, '0')), 'sk_abcd', NOW(6) FROM s`,
		`INSERT INTO settlements (merchant_id, settle_date, currency, payments_count, payments_amount, refunds_count, refunds_amount, net, created_at) ` + seq +
			`SELECT CONCAT('m', LPAD(n % 50, 4, '0')), DATE_SUB('2026-01-01', INTERVAL n DIV 50 DAY), 'EUR', 1, 1, 0, 0, 1, NOW(6) FROM s`,
		`INSERT INTO console_sessions (token_hash, created_at, expires_at) ` + seq +
			`SELECT UNHEX(SHA2(n, 256)), NOW(6), DATE_ADD(NOW(6), INTERVAL n MINUTE) FROM s`,
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

// TestQueriesUseTheirIndexes explains every statement of the console:
// each reads the index named, by a range or a lookup, never a table scan.
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
		{"session", qSession, "PRIMARY", []any{hash, now}},
		{"session purge", qSessionPurge, "idx_console_sessions_expires", []any{now, 100}},
		{"orders today", qOrdersToday, "PRIMARY", []any{orderNoAt(now)}},
		{"flagged count", qFlaggedCount, "idx_payments_flagged", flaggedArgs()},
		{"order by number", qOrderByNo, "PRIMARY", []any{order}},
		{"order by merchant_order_no", qOrderByMerchantNo, "uk_orders_merchant_order", []any{"m0001", []byte("mo1")}},
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
		{"failed deliveries of an endpoint", qFailedOfEndpoint, "idx_deliveries_endpoint", []any{"we_01H" + strings.Repeat("0", 22) + "1", "", PageSize + 1}},
		{"next endpoint", qNextEndpoint, "PRIMARY", []any{""}},
		{"events by id", fmt.Sprintf(qEventsByID, two), "PRIMARY", []any{"evt_a", "evt_b"}},
		{"event's merchant", qEventMerchant, "PRIMARY", []any{"evt_01H" + strings.Repeat("0", 22) + "1"}},
		{"endpoints", qEndpoints, "PRIMARY", []any{"", PageSize + 1}},
		{"endpoint counts", fmt.Sprintf(qEndpointCounts, two), "idx_deliveries_endpoint", []any{"we_01H" + strings.Repeat("0", 22) + "1", "we_01H" + strings.Repeat("0", 22) + "2"}},
		{"endpoint's merchant", qEndpointOwner, "PRIMARY", []any{"we_01H" + strings.Repeat("0", 22) + "1"}},
		{"merchants", qMerchants, "PRIMARY", []any{"", PageSize + 1}},
		{"keys of merchants", fmt.Sprintf(qKeysOf, two), "idx_api_keys_merchant", []any{"m0001", "m0002", maxKeysPerPage}},
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
		})
	}
}
