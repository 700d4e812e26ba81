// Package reconcile checks the books: that orders, payments, refunds and the
// ledger tell one consistent story. Each check is one SQL query that returns
// the rows breaking a rule, so a finding names exactly what to look at. It
// reads only; fixing is a human's job.
package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
)

// Finding is one row that breaks one rule.
type Finding struct {
	Check  string
	Detail string
}

func (f Finding) String() string { return f.Check + ": " + f.Detail }

// Report is the outcome of a run.
type Report struct {
	Orders, Payments, Refunds, LedgerEntries int64
	// ToRefund counts payments that took money no order keeps (duplicate,
	// late or of the wrong amount): money to pay back, not an inconsistency,
	// so the books stay clean (README.md, "Orders and refunds": no
	// interleaving of duplicates makes a finding). Each one is listed in
	// Unreturned.
	ToRefund int64
	// Returned counts such payments that the provider refunded
	// automatically (README.md, "Calls to providers"): settled, neither to refund by hand
	// nor a finding.
	Returned   int64
	Unreturned []Finding
	Findings   []Finding
}

// Clean reports whether no check found anything.
func (r Report) Clean() bool { return len(r.Findings) == 0 }

// Print writes the findings and a summary line.
func (r Report) Print(w io.Writer) {
	for _, f := range r.Unreturned {
		fmt.Fprintf(w, "TO REFUND %s\n", f.Detail)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "FINDING %s\n", f)
	}
	verdict := "clean"
	if !r.Clean() {
		verdict = fmt.Sprintf("%d findings", len(r.Findings))
	}
	fmt.Fprintf(w, "reconcile: %d orders, %d payments (%d to refund by hand, %d returned automatically), %d refunds, %d ledger entries: %s\n",
		r.Orders, r.Payments, r.ToRefund, r.Returned, r.Refunds, r.LedgerEntries, verdict)
}

const paidStates = `('PAID','PARTIALLY_REFUNDED','REFUNDED')`

// appliedPayment matches the payment that paid order o.
const appliedPayment = `p.order_no = o.order_no AND p.status = 'SUCCEEDED' AND p.result = 'applied'`

// unreturnedResults are the results of a payment that took the customer's
// money (status SUCCEEDED) and that no order keeps. A payment.failed took
// nothing, whatever its result says.
const unreturnedResults = `('duplicate_payment','late_payment','amount_mismatch')`

// unreturned lists the payments to pay back, one text column per row.
var unreturned = struct{ name, query string }{"payment to refund", `
SELECT CONCAT(p.provider, '/', CAST(p.txn_id AS CHAR), ' on order ', p.order_no, ': ', p.amount, ' ', p.currency, ' (', p.result, ')')
  FROM payments p WHERE p.status = 'SUCCEEDED' AND p.result IN ` + unreturnedResults + `
   AND NOT EXISTS (SELECT 1 FROM provider_calls c WHERE ` + autoRefundOf + `)
 ORDER BY p.id`}

// autoRefundOf matches the automatic refund of payment p:
// such a payment is being returned, or was, without a person.
const autoRefundOf = `c.provider = p.provider AND c.payment_txn_id = p.txn_id AND c.kind = 1`

// returned counts the payments whose automatic refund the provider
// settled as succeeded.
const returned = `SELECT COUNT(*) FROM payments p WHERE p.status = 'SUCCEEDED' AND p.result IN ` + unreturnedResults + `
   AND EXISTS (SELECT 1 FROM provider_calls c WHERE ` + autoRefundOf + ` AND c.settled = 'SUCCEEDED')`

// reservedRefunds are the refund statuses that hold their amount in the
// order's pending_refund_amount.
const reservedRefunds = `('PENDING','MISMATCHED')`

// checks: name and a query whose rows (one text column) are the findings.
var checks = []struct{ name, query string }{
	{"automatic refund failed", `
SELECT CONCAT(c.provider, '/', CAST(c.payment_txn_id AS CHAR), ' on order ', c.order_no, ': automatic refund ', c.refund_no, ' of ',
              c.amount, ' ', c.currency, CASE WHEN c.settled = 'FAILED' THEN ' failed at the provider' ELSE ' refused or never accepted' END)
  FROM provider_calls c WHERE c.kind = 1 AND (c.status = 2 OR c.settled = 'FAILED')`},
	{"refund settled with another amount", `
SELECT CONCAT(r.refund_no, ' on order ', r.order_no, ': asked ', r.amount, ' ', o.currency, ', ', r.provider, '/', CAST(r.txn_id AS CHAR),
              ' reported ', r.reported_status, ' of ', r.reported_amount, ' ', r.reported_currency, ' (the ', r.amount, ' stays reserved)')
  FROM refunds r JOIN orders o ON o.order_no = r.order_no WHERE r.status = 'MISMATCHED'`},
	{"automatic refund settled with another amount", `
SELECT CONCAT(c.provider, '/', CAST(c.payment_txn_id AS CHAR), ' on order ', c.order_no, ': automatic refund ', c.refund_no, ' asked ',
              c.amount, ' ', c.currency, ', ', c.provider, '/', CAST(c.settled_txn_id AS CHAR), ' reported ', c.reported_status, ' of ',
              c.reported_amount, ' ', c.reported_currency)
  FROM provider_calls c WHERE c.kind = 1 AND c.settled = 'MISMATCHED'`},
	{"order paid twice", `
SELECT CONCAT(order_no, ' has ', COUNT(*), ' applied payments')
  FROM payments WHERE status = 'SUCCEEDED' AND result = 'applied'
 GROUP BY order_no HAVING COUNT(*) > 1`},
	{"paid order without its payment", `
SELECT CONCAT(o.order_no, ' is ', o.status, ' but no applied payment of ', o.amount, ' ', o.currency, ' exists')
  FROM orders o
 WHERE o.status IN ` + paidStates + `
   AND NOT EXISTS (SELECT 1 FROM payments p WHERE ` + appliedPayment + ` AND p.amount = o.amount AND p.currency = o.currency)`},
	{"applied payment on an unpaid order", `
SELECT CONCAT(o.order_no, ' is ', o.status, ' but payment ', p.provider, '/', CAST(p.txn_id AS CHAR), ' was applied')
  FROM orders o JOIN payments p ON ` + appliedPayment + `
 WHERE o.status NOT IN ` + paidStates},
	{"payment for an unknown order", `
SELECT CONCAT(p.provider, '/', CAST(p.txn_id AS CHAR), ' names order ', p.order_no)
  FROM payments p LEFT JOIN orders o ON o.order_no = p.order_no WHERE o.order_no IS NULL`},
	{"refund for an unknown order", `
SELECT CONCAT(r.refund_no, ' names order ', r.order_no)
  FROM refunds r LEFT JOIN orders o ON o.order_no = r.order_no WHERE o.order_no IS NULL`},
	{"refunds above the amount", `
SELECT CONCAT(order_no, ': refunded ', refunded_amount, ' + pending ', pending_refund_amount, ' > amount ', amount)
  FROM orders WHERE refunded_amount < 0 OR pending_refund_amount < 0 OR refunded_amount + pending_refund_amount > amount`},
	// A MISMATCHED refund keeps its reservation: it counts as pending.
	{"refund totals differ from refunds", `
SELECT CONCAT(o.order_no, ': refunded_amount ', o.refunded_amount, ' vs succeeded refunds ', COALESCE(SUM(CASE WHEN r.status = 'SUCCEEDED' THEN r.amount END), 0),
              ', pending_refund_amount ', o.pending_refund_amount, ' vs pending refunds ', COALESCE(SUM(CASE WHEN r.status IN ` + reservedRefunds + ` THEN r.amount END), 0))
  FROM orders o LEFT JOIN refunds r ON r.order_no = o.order_no
 GROUP BY o.order_no, o.refunded_amount, o.pending_refund_amount
HAVING o.refunded_amount <> COALESCE(SUM(CASE WHEN r.status = 'SUCCEEDED' THEN r.amount END), 0)
    OR o.pending_refund_amount <> COALESCE(SUM(CASE WHEN r.status IN ` + reservedRefunds + ` THEN r.amount END), 0)`},
	{"status disagrees with amounts", `
SELECT CONCAT(order_no, ' is ', status, ' with amount ', amount, ', refunded ', refunded_amount, ', pending ', pending_refund_amount,
              ', paid_at ', IF(paid_at IS NULL, 'null', 'set'))
  FROM orders
 WHERE (status IN ('CREATED','CLOSED') AND (refunded_amount <> 0 OR pending_refund_amount <> 0 OR paid_at IS NOT NULL))
    OR (status IN ` + paidStates + ` AND paid_at IS NULL)
    OR (status = 'PAID' AND refunded_amount <> 0)
    OR (status = 'PARTIALLY_REFUNDED' AND (refunded_amount <= 0 OR refunded_amount >= amount))
    OR (status = 'REFUNDED' AND refunded_amount <> amount)
    OR status NOT IN ('CREATED','CLOSED','PAID','PARTIALLY_REFUNDED','REFUNDED')`},
	{"ledger sums differ from orders", `
SELECT CONCAT(o.order_no, ' (', o.status, '): ledger payments ', COALESCE(SUM(CASE WHEN l.kind = 'payment' THEN l.amount END), 0),
              ' vs ', IF(o.status IN ` + paidStates + `, o.amount, 0),
              ', ledger refunds ', COALESCE(SUM(CASE WHEN l.kind = 'refund' THEN l.amount END), 0), ' vs ', o.refunded_amount)
  FROM orders o LEFT JOIN ledger_entries l ON l.order_no = o.order_no
 GROUP BY o.order_no, o.status, o.amount, o.refunded_amount
HAVING COALESCE(SUM(CASE WHEN l.kind = 'payment' THEN l.amount END), 0) <> IF(o.status IN ` + paidStates + `, o.amount, 0)
    OR COALESCE(SUM(CASE WHEN l.kind = 'refund' THEN l.amount END), 0) <> o.refunded_amount`},
	// The currency too, the order's: the sums above compare amounts only,
	// and the settlement sums the ledger by its entries' currency.
	{"ledger entry without its transaction", `
SELECT CONCAT(l.kind, ' ', l.provider, '/', CAST(l.txn_id AS CHAR), ' on ', l.order_no, ': ', l.amount, ' ', l.currency)
  FROM ledger_entries l
 WHERE (l.kind = 'payment' AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.provider = l.provider AND p.txn_id = l.txn_id
                                             AND p.order_no = l.order_no AND p.status = 'SUCCEEDED' AND p.result = 'applied' AND p.amount = l.amount))
    OR (l.kind = 'refund' AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.provider = l.provider AND r.txn_id = l.txn_id
                                            AND r.order_no = l.order_no AND r.status = 'SUCCEEDED' AND r.amount = l.amount))
    OR l.kind NOT IN ('payment','refund')
    OR EXISTS (SELECT 1 FROM orders o WHERE o.order_no = l.order_no AND o.currency <> l.currency)`},
	{"settled refund without its ledger entry", `
SELECT CONCAT(r.refund_no, ' SUCCEEDED by ', r.provider, '/', CAST(r.txn_id AS CHAR), ' is not in the ledger')
  FROM refunds r
 WHERE r.status = 'SUCCEEDED' AND NOT EXISTS (SELECT 1 FROM ledger_entries l WHERE l.kind = 'refund' AND l.provider = r.provider AND l.txn_id = r.txn_id)`},
}

// Run executes every check in one read-only REPEATABLE READ transaction:
// InnoDB serves all its reads from the snapshot taken at the first one, so
// concurrent writes cannot make correct books look wrong.
func Run(ctx context.Context, gdb *gorm.DB) (Report, error) {
	var rep Report
	err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		counts := []struct {
			dst   *int64
			query string
		}{
			{&rep.Orders, `SELECT COUNT(*) FROM orders`},
			{&rep.Payments, `SELECT COUNT(*) FROM payments`},
			{&rep.Refunds, `SELECT COUNT(*) FROM refunds`},
			{&rep.LedgerEntries, `SELECT COUNT(*) FROM ledger_entries`},
		}
		for _, c := range counts {
			if err := tx.Raw(c.query).Row().Scan(c.dst); err != nil {
				return fmt.Errorf("count: %w", err)
			}
		}
		var err error
		if rep.Unreturned, err = query(tx, unreturned.name, unreturned.query); err != nil {
			return err
		}
		rep.ToRefund = int64(len(rep.Unreturned))
		if err := tx.Raw(returned).Row().Scan(&rep.Returned); err != nil {
			return fmt.Errorf("count returned payments: %w", err)
		}
		for _, c := range checks {
			found, err := query(tx, c.name, c.query)
			if err != nil {
				return err
			}
			rep.Findings = append(rep.Findings, found...)
		}
		return nil
	}, &sql.TxOptions{ReadOnly: true})
	return rep, err
}

// query runs one check: each row is a Finding of that check.
func query(tx *gorm.DB, name, q string) ([]Finding, error) {
	found, err := db.QueryAll(tx.Statement.Context, tx, func(rows *sql.Rows) (Finding, error) {
		var detail string
		err := rows.Scan(&detail)
		return Finding{Check: name, Detail: strings.TrimSpace(detail)}, err
	}, q)
	if err != nil {
		return nil, fmt.Errorf("check %q: %w", name, err)
	}
	return found, nil
}
