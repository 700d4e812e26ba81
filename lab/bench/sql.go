package bench

// The statements the service issues, copied verbatim (indentation included,
// since the driver sends the text as written) from its store files, so that
// the raw-SQL baseline sends the server exactly what paysvc sends.
// TestSQLMatchesService fails if a copy drifts from its source: when the
// service's SQL changes, change the copy and re-measure.

// From internal/idempotency/store.go, sqlClaim.
const sqlClaim = `INSERT INTO idempotency_records (key_hash, request_hash, status, expires_at)
		 VALUES (?, ?, ?, ?)`

// From internal/idempotency/store.go, sqlLoad.
const sqlLoad = `SELECT request_hash, status, expires_at, response_status, response_format, response
		   FROM idempotency_records WHERE key_hash = ?`

// From internal/idempotency/store.go, sqlFence.
const sqlFence = `UPDATE idempotency_records
		    SET status = ?, response_status = ?, response_format = ?, response = ?
		  WHERE key_hash = ? AND status = ?`

// From internal/payments/store.go, insertPayment.
const sqlInsertPayment = `INSERT INTO payments (provider, txn_id, order_no, status, result, amount, currency, created_at, updated_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// From internal/payments/store.go, insertLedger.
const sqlInsertLedger = `INSERT INTO ledger_entries (provider, kind, txn_id, order_no, amount, currency, created_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?)`

// The statement internal/orders/store.go, Transition.update, assembles for
// CREATED → PAID with an amount and currency (a payment callback).
const sqlOrderPaid = `UPDATE orders SET status = ?, version = version + 1, updated_at = ?` +
	`, paid_at = ?` +
	` WHERE order_no = ? AND status = ?` +
	` AND amount = ? AND currency = ?`

// From internal/orders/store.go, selectOrder.
const sqlSelectOrder = `SELECT order_no, merchant_id, merchant_order_no, status, amount, currency,
       refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at, expires_at
  FROM orders`

// From internal/orders/store.go, Insert.
const sqlInsertOrder = `INSERT INTO orders (order_no, merchant_id, merchant_order_no, status, amount, currency,
		                     refunded_amount, pending_refund_amount, description, version, created_at, updated_at, paid_at, expires_at)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// Record states, as internal/idempotency stores them.
const (
	statusProcessing = 1
	statusCompleted  = 2
)

// The statement internal/events/record.go, Recorder.insert, assembles for
// one event.
const sqlInsertEvent = `INSERT INTO events (id, merchant_id, type, created_at, data, delivery, next_attempt_at) VALUES ` +
	`(?, ?, ?, ?, ?, ?, ?)`

// The two batches of the one-commit engine (docs/DESIGN.md, "Batches
// only where nothing can be aborted in between"): the claim opens the
// business transaction in the same round trip, and a duplicate's claim (1062
// inside the transaction) is followed by one query that ends the transaction
// and reads the record (go-sql-driver skips the ROLLBACK's empty result).
// TestSQLMatchesService checks that the engine joins the same constants the
// same way.
const (
	sqlBeginClaim   = "START TRANSACTION; " + sqlClaim
	sqlRollbackLoad = "ROLLBACK; " + sqlLoad
)
