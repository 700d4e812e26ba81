package soak

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/paysvc/paysvc/client"
)

// History is everything a soak run saw, gathered after it healed and went
// quiet: what the merchants' clients were answered, what the provider sent
// and recorded, what the merchant receiver got, and what the database
// holds. Check judges it; it is plain data so that a test can doctor one.
type History struct {
	Ops       []Op
	Callbacks CallbackStats
	Provider  ProviderRecord
	Received  map[string]Received // by webhook-id
	// EndpointEvents is the filter of the webhook endpoint every merchant
	// registered through the API beside its PAYSVC_NOTIFY_ENDPOINTS one;
	// nil: none registered.
	EndpointEvents []string
	DB             Snapshot
	// Reconcile is `paysvc reconcile`'s exit code and output.
	ReconcileCode   int
	ReconcileOutput string
	// Server500 counts the access-log lines with status 500 in every
	// instance's output; Panics the panics found there.
	Server500 int
	Panics    []string
	// Exits are the instances' exits the nemesis did not cause (a serve
	// that gave up at start, a crash).
	Exits []string
	// Revocation: the probes of the revoked key, sent after the grace the
	// service has to refuse it everywhere, and their answers.
	RevokedProbes   int
	RevokedAccepted int // probes answered other than 401
	// Quiet: the run reached quiescence before the checks (no pending
	// event delivery or provider call); Unsettled says what was left.
	Quiet     bool
	Unsettled string
}

// Op is one logical merchant call: its key and body chosen once, sent with
// retries until a final answer (or the call's deadline).
type Op struct {
	Kind     string // create, cancel, refund
	Merchant string
	Key      string
	// MerchantOrderNo / MerchantRefundNo are the merchant's references;
	// OrderNo the order the call is about (for create: from the answer).
	MerchantOrderNo  string
	MerchantRefundNo string
	OrderNo          string
	Amount           int64
	Start            time.Time
	Took             time.Duration
	Attempts         int
	// Statuses are every attempt's HTTP status (0: no answer).
	Statuses []int
	// Final: a final answer came (2xx, or a 4xx no retry changes); Status
	// and Body are that answer, Replayed its Idempotent-Replayed.
	Final    bool
	Status   int
	Code     string
	Body     []byte
	Replayed bool
	// Recheck is the same request sent again after the run, to the same
	// key and body: it must replay the first final answer, byte for byte.
	Recheck *Answer
	// RefundNo is the refund a 201 created.
	RefundNo string

	recheck   func(ctx context.Context, opts ...client.CallOption) error
	lateFinal bool // its first final answer came from the recheck
}

// Answer is one HTTP answer.
type Answer struct {
	Status   int
	Body     []byte
	Replayed bool
	Err      string
}

// CallbackStats is what the provider's deliveries were answered.
type CallbackStats struct {
	Deliveries int64
	Attempts   int64
	ByStatus   map[int]int64
	ByResult   map[string]int64
	GaveUp     int64
	Published  int64 // through JetStream
}

// ProviderRecord is what the simulated provider recorded.
type ProviderRecord struct {
	// Payments it took, by txn_id.
	Payments map[string]ProviderPayment
	// Refunds by Idempotency-Key: every key it was called with.
	Refunds map[string]ProviderRefund
}

// ProviderPayment is a payment the provider took (or failed).
type ProviderPayment struct {
	TxnID     string
	OrderNo   string
	Amount    int64
	Succeeded bool
}

// ProviderRefund is one refund key's record at the provider.
type ProviderRefund struct {
	Key          string
	Calls        int // POSTs with this key
	Moves        int // refunds the provider made for it (money moved)
	PaymentTxnID string
	Amount       int64
	Reference    string
}

// Received is what the merchant receiver got for one webhook-id:
// Deliveries at the merchant's PAYSVC_NOTIFY_ENDPOINTS endpoint,
// EndpointDeliveries at its API endpoint.
type Received struct {
	Type               string
	OrderNo            string
	Deliveries         int
	EndpointDeliveries int
	// Merchants are the merchants whose endpoints (either one) got it.
	Merchants []string
}

// Snapshot is what the database holds at the end.
type Snapshot struct {
	Orders   map[string]DBOrder // by order_no
	Payments []DBPayment
	Refunds  map[string]DBRefund // by refund_no
	Events   []DBEvent
	// Ledger sums by order_no.
	LedgerPayments map[string]int64
	LedgerRefunds  map[string]int64
	// OrdersByRef counts orders per merchant + "/" + merchant_order_no.
	OrdersByRef  map[string]int
	RefundsByRef map[string]int
	// PendingCalls are provider calls not yet done or failed.
	PendingCalls int
	// CallKeys are the Idempotency-Keys of the provider calls paysvc
	// decided, with their refund_no.
	CallKeys map[string]string
	// AutoSettled is each automatic refund's outcome as the provider's
	// refund callback reported it (provider_calls.settled; "" none yet),
	// by Idempotency-Key.
	AutoSettled map[string]string
}

// DBOrder is an order row.
type DBOrder struct {
	OrderNo, Merchant, MerchantOrderNo, Status string
	Amount, Refunded, Pending                  int64
}

// DBPayment is a payments row.
type DBPayment struct {
	TxnID, OrderNo, Status, Result string
	Amount                         int64
}

// DBRefund is a refunds row.
type DBRefund struct {
	RefundNo, OrderNo, Merchant, MerchantRefundNo, Status string
	Amount                                                int64
}

// DBEvent is an events row, with what its data names.
type DBEvent struct {
	ID, Merchant, Type, OrderNo, RefundNo, PaymentTxn string
	Delivery                                          int // 0 none, 1 pending, 2 delivered, 3 failed
}

// Invariant is one checked promise and its counts.
type Invariant struct {
	Name   string
	Counts []Count // what was counted, violations and context alike
	// Violations are examples of what broke it (at most a few).
	Violations []string
	failed     bool
}

// Count is one labelled number of an invariant.
type Count struct {
	Label string
	N     int
	Bad   bool // a non-zero N breaks the invariant
}

// OK reports whether the invariant holds.
func (iv *Invariant) OK() bool { return !iv.failed }

func (iv *Invariant) count(label string, n int, bad bool) {
	iv.Counts = append(iv.Counts, Count{Label: label, N: n, Bad: bad})
	if bad && n > 0 {
		iv.failed = true
	}
}

func (iv *Invariant) violation(format string, args ...any) {
	if len(iv.Violations) < 5 {
		iv.Violations = append(iv.Violations, fmt.Sprintf(format, args...))
	}
}

// Invariant names, in the order Check reports them.
const (
	InvAcknowledged = "every acknowledged request exists once and replays its first answer"
	InvPayments     = "no payment applied twice"
	InvProvider     = "the provider moved money at most once per key and was asked for every refund"
	InvEvents       = "every committed change has its event, and every event reached its endpoint"
	InvLedger       = "ledger sums equal the orders"
	InvReconcile    = "paysvc reconcile is clean"
	InvNo500        = "no 500 was ever answered"
	InvRevoked      = "a revoked key is refused"
	InvAlive        = "no instance exited by itself"
	InvQuiet        = "the system went quiet (no pending delivery or provider call)"
)

// paidStates are the order states whose payment was applied.
var paidStates = map[string]bool{"PAID": true, "PARTIALLY_REFUNDED": true, "REFUNDED": true}

// flaggedResults are the payment results that took money no order keeps.
var flaggedResults = map[string]bool{"duplicate_payment": true, "late_payment": true, "amount_mismatch": true}

// Check judges h against every invariant.
func Check(h *History) []*Invariant {
	return []*Invariant{
		checkAcknowledged(h),
		checkPayments(h),
		checkProvider(h),
		checkEvents(h),
		checkLedger(h),
		checkReconcile(h),
		checkNo500(h),
		checkRevoked(h),
		checkAlive(h),
		checkQuiet(h),
	}
}

// AllHold reports whether every invariant holds.
func AllHold(ivs []*Invariant) bool {
	for _, iv := range ivs {
		if !iv.OK() {
			return false
		}
	}
	return true
}

func checkAcknowledged(h *History) *Invariant {
	iv := &Invariant{Name: InvAcknowledged}
	var acked, unknown, lost, doubled, replayMismatch, notReplayed, refusedWritten int
	for _, op := range h.Ops {
		if !op.Final {
			unknown++
			continue
		}
		acked++
		if op.Recheck == nil || op.Recheck.Status != op.Status || !bytes.Equal(op.Recheck.Body, op.Body) {
			replayMismatch++
			got := "no answer"
			if op.Recheck != nil {
				got = fmt.Sprintf("%d %.120s %s", op.Recheck.Status, op.Recheck.Body, op.Recheck.Err)
			}
			iv.violation("%s %s key %s: first answer %d %.120s, again: %s", op.Kind, op.Merchant, op.Key, op.Status, op.Body, got)
		} else if !op.Recheck.Replayed {
			notReplayed++
			iv.violation("%s %s key %s: sent again, it ran again instead of replaying", op.Kind, op.Merchant, op.Key)
		}
		switch {
		case op.Kind == "create" && op.Status == 201:
			o, ok := h.DB.Orders[op.OrderNo]
			n := h.DB.OrdersByRef[op.Merchant+"/"+op.MerchantOrderNo]
			switch {
			case !ok || n == 0:
				lost++
				iv.violation("order %s (%s) answered 201 but is not in the database", op.OrderNo, op.MerchantOrderNo)
			case n > 1:
				doubled++
				iv.violation("order %s/%s is in the database %d times", op.Merchant, op.MerchantOrderNo, n)
			case o.Amount != op.Amount || o.Merchant != op.Merchant || o.MerchantOrderNo != op.MerchantOrderNo:
				// The order_no answered must be the order asked for, not
				// another of the merchant's (an answer stored under the
				// wrong request): that order exists too, so only its
				// merchant_order_no tells.
				lost++
				iv.violation("order %s: database has %s %s %d, the merchant was answered it for %s %s %d", op.OrderNo, o.Merchant,
					o.MerchantOrderNo, o.Amount, op.Merchant, op.MerchantOrderNo, op.Amount)
			}
		case op.Kind == "refund" && op.Status == 201:
			r, ok := h.DB.Refunds[op.RefundNo]
			n := h.DB.RefundsByRef[op.Merchant+"/"+op.MerchantRefundNo]
			switch {
			case !ok || n == 0:
				lost++
				iv.violation("refund %s (%s) answered 201 but is not in the database", op.RefundNo, op.MerchantRefundNo)
			case n > 1:
				doubled++
				iv.violation("refund %s/%s is in the database %d times", op.Merchant, op.MerchantRefundNo, n)
			case r.Amount != op.Amount || r.OrderNo != op.OrderNo || r.Merchant != op.Merchant:
				lost++
				iv.violation("refund %s: database has %s %s %d, answered %s %s %d", op.RefundNo, r.Merchant, r.OrderNo, r.Amount,
					op.Merchant, op.OrderNo, op.Amount)
			}
		case op.Kind == "refund" && op.Status >= 400:
			// A refused refund reserves nothing and writes no row.
			if n := h.DB.RefundsByRef[op.Merchant+"/"+op.MerchantRefundNo]; n > 0 {
				refusedWritten++
				iv.violation("refund %s/%s answered %d %s, yet the database holds it", op.Merchant, op.MerchantRefundNo, op.Status, op.Code)
			}
		case op.Kind == "cancel" && op.Status == 200:
			if o, ok := h.DB.Orders[op.OrderNo]; !ok || o.Status != "CLOSED" {
				lost++
				iv.violation("order %s: cancel answered 200, the database has it %s", op.OrderNo, o.Status)
			}
		}
	}
	iv.count("acknowledged", acked, false)
	iv.count("no final answer", unknown, false)
	iv.count("lost", lost, true)
	iv.count("doubled", doubled, true)
	iv.count("replay differs", replayMismatch, true)
	iv.count("ran again", notReplayed, true)
	iv.count("refused, yet written", refusedWritten, true)
	return iv
}

func checkPayments(h *History) *Invariant {
	iv := &Invariant{Name: InvPayments}
	applied := map[string]int{}
	byTxn := map[string]int{}
	for _, p := range h.DB.Payments {
		byTxn[p.TxnID]++
		if p.Result == "applied" && p.Status == "SUCCEEDED" {
			applied[p.OrderNo]++
		}
	}
	var doubled, txnTwice, paidWithout, appliedUnpaid int
	for o, n := range applied {
		if n > 1 {
			doubled++
			iv.violation("order %s has %d applied payments", o, n)
		}
		if ord, ok := h.DB.Orders[o]; ok && !paidStates[ord.Status] {
			appliedUnpaid++
			iv.violation("order %s has an applied payment but is %s", o, ord.Status)
		}
	}
	for txn, n := range byTxn {
		if n > 1 {
			txnTwice++
			iv.violation("provider transaction %s recorded %d times", txn, n)
		}
	}
	var paid int
	for no, o := range h.DB.Orders {
		if paidStates[o.Status] {
			paid++
			if applied[no] != 1 {
				paidWithout++
				iv.violation("order %s is %s with %d applied payments", no, o.Status, applied[no])
			}
		}
	}
	// Every payment the provider took is in the database (a lost
	// callback is recovered by the sweep's status query).
	var missing int
	for txn, p := range h.Provider.Payments {
		if p.Succeeded && byTxn[txn] == 0 {
			if _, known := h.DB.Orders[p.OrderNo]; known {
				missing++
				iv.violation("provider payment %s of order %s is not in the database", txn, p.OrderNo)
			}
		}
	}
	// What the database says was taken must be what the provider took: a
	// payment applied with another amount than its order's (or than the
	// provider's), or booked as succeeded when the provider failed it,
	// leaves the order paid and the ledger equal to it while the customer
	// was charged otherwise.
	var disagree int
	for _, p := range h.DB.Payments {
		if p.Status != "SUCCEEDED" {
			continue
		}
		pp, ok := h.Provider.Payments[p.TxnID]
		switch {
		case !ok || !pp.Succeeded || pp.Amount != p.Amount || pp.OrderNo != p.OrderNo:
			disagree++
			iv.violation("payment %s of order %s: SUCCEEDED %d in the database, the provider has %+v", p.TxnID, p.OrderNo, p.Amount, pp)
		case p.Result == "applied" && p.Amount != h.DB.Orders[p.OrderNo].Amount:
			disagree++
			iv.violation("payment %s applied %d to order %s of %d", p.TxnID, p.Amount, p.OrderNo, h.DB.Orders[p.OrderNo].Amount)
		}
	}
	iv.count("paid orders", paid, false)
	iv.count("payments recorded", len(h.DB.Payments), false)
	iv.count("doubled", doubled, true)
	iv.count("txn recorded twice", txnTwice, true)
	iv.count("paid without one applied payment", paidWithout, true)
	iv.count("applied on an unpaid order", appliedUnpaid, true)
	iv.count("provider payments missing", missing, true)
	iv.count("disagrees with the provider or its order", disagree, true)
	return iv
}

func checkProvider(h *History) *Invariant {
	iv := &Invariant{Name: InvProvider}
	var calls, moved, movedTwice, notAsked, overRefunded, byRefTwice int
	refundedByTxn := map[string]int64{}
	refs := map[string]int{}
	for k, r := range h.Provider.Refunds {
		calls += r.Calls
		moved += r.Moves
		if r.Moves > 1 {
			movedTwice++
			iv.violation("key %s moved money %d times", k, r.Moves)
		}
		if r.Moves > 0 {
			refundedByTxn[r.PaymentTxnID] += r.Amount
			refs[r.Reference]++
		}
	}
	for ref, n := range refs {
		if n > 1 {
			byRefTwice++
			iv.violation("refund %s was made %d times under different keys", ref, n)
		}
	}
	for txn, sum := range refundedByTxn {
		p, ok := h.Provider.Payments[txn]
		if !ok || sum > p.Amount {
			overRefunded++
			iv.violation("payment %s: refunded %d of %d", txn, sum, p.Amount)
		}
	}
	// Every refund paysvc accepted, the merchants' and the automatic ones.
	asked := func(key string) bool { r, ok := h.Provider.Refunds[key]; return ok && r.Moves == 1 }
	seen := map[string]bool{}
	for _, op := range h.Ops {
		if op.Kind == "refund" && op.Final && op.Status == 201 && !asked(op.RefundNo) {
			notAsked++
			seen[op.RefundNo] = true
			iv.violation("refund %s accepted (201) but the provider was never asked", op.RefundNo)
		}
	}
	// A refund whose request never got a final answer (the client gave up
	// under the nemesis) may still have been accepted and settled: the
	// database, not the answers, says which refunds must have moved money.
	for no, r := range h.DB.Refunds {
		if r.Status == "SUCCEEDED" && !seen[no] && !asked(no) {
			notAsked++
			iv.violation("refund %s is SUCCEEDED in the database but the provider was never asked", no)
		}
	}
	// An automatic refund has no refund row: nothing above, and nothing the
	// quiet wait looks at, would see its callback lost or left unapplied.
	// The provider sent every callback before the snapshot, so each must
	// have settled its call.
	var unsettled int
	for _, p := range h.DB.Payments {
		if k := "auto:mockpay:" + p.TxnID; flaggedResults[p.Result] && h.DB.AutoSettled[k] != "SUCCEEDED" {
			unsettled++
			iv.violation("automatic refund %s of payment %s (%s): settled %q", k, p.TxnID, p.Result, h.DB.AutoSettled[k])
		}
	}
	// The converse: money the provider moved must be a refund the database
	// holds as succeeded (or a flagged payment's automatic refund), else
	// the merchant was told it failed, or never told, while it was paid out.
	autoKeys := map[string]DBPayment{}
	appliedTxn := map[string]string{} // order_no → its applied payment
	for _, p := range h.DB.Payments {
		if flaggedResults[p.Result] {
			autoKeys["auto:mockpay:"+p.TxnID] = p
		}
		if p.Result == "applied" && p.Status == "SUCCEEDED" {
			appliedTxn[p.OrderNo] = p.TxnID
		}
	}
	// And it must be paid back from the payment it was booked against, for
	// the amount booked: over-refunding is checked per payment above, but
	// a refund taken from another customer's payment, or for another
	// amount, stays under every payment's amount.
	var unbooked, misapplied int
	for k, r := range h.Provider.Refunds {
		if r.Moves == 0 {
			continue
		}
		if p, ok := autoKeys[k]; ok {
			if r.PaymentTxnID != p.TxnID || r.Amount != p.Amount {
				misapplied++
				iv.violation("automatic refund %s: the provider paid back %d of %s, the flagged payment is %d", k, r.Amount, r.PaymentTxnID, p.Amount)
			}
			continue
		}
		db, ok := h.DB.Refunds[k]
		if !ok || db.Status != "SUCCEEDED" {
			unbooked++
			status := "not in the database"
			if ok {
				status = db.Status + " in the database"
			}
			iv.violation("the provider made refund %s (%d of %s), which is %s", k, r.Amount, r.PaymentTxnID, status)
			continue
		}
		if r.PaymentTxnID != appliedTxn[db.OrderNo] || r.Amount != db.Amount {
			misapplied++
			iv.violation("refund %s: the provider paid back %d of %s, the database has %d of order %s paid by %s", k, r.Amount, r.PaymentTxnID,
				db.Amount, db.OrderNo, appliedTxn[db.OrderNo])
		}
	}
	for _, p := range h.DB.Payments {
		if flaggedResults[p.Result] && !asked("auto:mockpay:"+p.TxnID) {
			notAsked++
			iv.violation("payment %s (%s) was not refunded at the provider", p.TxnID, p.Result)
		}
	}
	iv.count("keys", len(h.Provider.Refunds), false)
	iv.count("calls", calls, false)
	iv.count("refunds made", moved, false)
	iv.count("moved twice", movedTwice, true)
	iv.count("one refund under two keys", byRefTwice, true)
	iv.count("over-refunded payments", overRefunded, true)
	iv.count("accepted, never asked", notAsked, true)
	iv.count("automatic refund not settled", unsettled, true)
	iv.count("made, not succeeded in the database", unbooked, true)
	iv.count("refund of another payment or amount", misapplied, true)
	return iv
}

func checkEvents(h *History) *Invariant {
	iv := &Invariant{Name: InvEvents}
	has := map[string]bool{} // type + " " + subject
	var undelivered, phantom, failed, missed, unfiltered, misrouted, altered int
	for _, e := range h.DB.Events {
		has[e.Type+" "+e.OrderNo] = true
		if e.RefundNo != "" {
			has[e.Type+" "+e.RefundNo] = true
		}
		if e.PaymentTxn != "" {
			has[e.Type+" "+e.PaymentTxn] = true
		}
		if r, ok := h.Received[e.ID]; !ok || r.Deliveries == 0 {
			undelivered++
			iv.violation("event %s (%s of %s) never reached its endpoint", e.ID, e.Type, e.OrderNo)
		}
		if h.EndpointEvents != nil {
			r := h.Received[e.ID]
			switch wanted := contains(h.EndpointEvents, e.Type); {
			case wanted && r.EndpointDeliveries == 0:
				missed++
				iv.violation("event %s (%s of %s) never reached the merchant's API endpoint", e.ID, e.Type, e.OrderNo)
			case !wanted && r.EndpointDeliveries > 0:
				unfiltered++
				iv.violation("event %s (%s of %s) reached the API endpoint, whose filter does not take it", e.ID, e.Type, e.OrderNo)
			}
		}
		if r, ok := h.Received[e.ID]; ok {
			for _, m := range r.Merchants {
				if m != e.Merchant {
					misrouted++
					iv.violation("event %s (%s of %s) of merchant %s reached merchant %s's endpoint", e.ID, e.Type, e.OrderNo, e.Merchant, m)
				}
			}
			if r.Type != e.Type || r.OrderNo != e.OrderNo {
				altered++
				iv.violation("event %s is %s of %s in the database, the receiver got %s of %s", e.ID, e.Type, e.OrderNo, r.Type, r.OrderNo)
			}
		}
		if e.Delivery == 3 {
			failed++
			iv.violation("event %s (%s of %s): its delivery failed after every retry", e.ID, e.Type, e.OrderNo)
		}
	}
	ids := map[string]bool{}
	for _, e := range h.DB.Events {
		ids[e.ID] = true
	}
	for id, r := range h.Received {
		if !ids[id] {
			phantom++
			iv.violation("the receiver got %s (%s), which the database does not hold", id, r.Type)
		}
	}
	var missing int
	need := func(typ, subject, what string) {
		if !has[typ+" "+subject] {
			missing++
			iv.violation("%s has no %s event", what, typ)
		}
	}
	for no, o := range h.DB.Orders {
		switch o.Status {
		case "PAID", "PARTIALLY_REFUNDED", "REFUNDED":
			need("order.paid", no, "order "+no+" ("+o.Status+")")
		case "CLOSED":
			need("order.closed", no, "order "+no+" (CLOSED)")
		}
		switch o.Status {
		case "PARTIALLY_REFUNDED":
			need("order.partially_refunded", no, "order "+no)
		case "REFUNDED":
			need("order.refunded", no, "order "+no)
		}
	}
	for no, r := range h.DB.Refunds {
		switch r.Status {
		case "SUCCEEDED":
			need("refund.succeeded", no, "refund "+no)
		case "FAILED":
			need("refund.failed", no, "refund "+no)
		}
	}
	for _, p := range h.DB.Payments {
		if flaggedResults[p.Result] && p.Status == "SUCCEEDED" {
			need("payment.flagged", p.TxnID, "flagged payment "+p.TxnID)
			if h.DB.AutoSettled["auto:mockpay:"+p.TxnID] == "SUCCEEDED" {
				need("payment.refunded", p.TxnID, "flagged payment "+p.TxnID+" refunded")
			}
		}
	}
	// The converse: every event must describe a change the database kept,
	// once. An event written outside the transaction of its change (or
	// kept when that change rolled back) is delivered like any other and
	// would pass every check above.
	var unfounded, twice int
	subjects := map[string]int{}
	for _, e := range h.DB.Events {
		o, hasOrder := h.DB.Orders[e.OrderNo]
		r, hasRefund := h.DB.Refunds[e.RefundNo]
		subject, fits := "", true
		switch e.Type {
		case "order.paid":
			subject, fits = e.OrderNo, hasOrder && paidStates[o.Status]
		case "order.closed":
			subject, fits = e.OrderNo, hasOrder && o.Status == "CLOSED"
		case "order.refunded":
			subject, fits = e.OrderNo, hasOrder && o.Status == "REFUNDED"
		case "order.partially_refunded":
			subject, fits = e.RefundNo, hasOrder && (o.Status == "PARTIALLY_REFUNDED" || o.Status == "REFUNDED") &&
				hasRefund && r.Status == "SUCCEEDED"
		case "refund.succeeded":
			subject, fits = e.RefundNo, hasRefund && r.Status == "SUCCEEDED"
		case "refund.failed":
			subject, fits = e.RefundNo, hasRefund && r.Status == "FAILED"
		case "payment.flagged", "payment.refunded":
			subject, fits = e.PaymentTxn, false
			for _, p := range h.DB.Payments {
				if p.TxnID == e.PaymentTxn && flaggedResults[p.Result] {
					fits = true
				}
			}
			if e.Type == "payment.refunded" && h.DB.AutoSettled["auto:mockpay:"+e.PaymentTxn] != "SUCCEEDED" {
				fits = false
			}
		}
		if !fits {
			unfounded++
			iv.violation("event %s (%s of %s %s) names a change the database does not hold", e.ID, e.Type, e.OrderNo, e.RefundNo+e.PaymentTxn)
		}
		if subject != "" {
			if subjects[e.Type+" "+subject]++; subjects[e.Type+" "+subject] == 2 {
				twice++
				iv.violation("%s of %s recorded more than once", e.Type, subject)
			}
		}
	}
	var deliveries int
	for _, r := range h.Received {
		deliveries += r.Deliveries + r.EndpointDeliveries
	}
	iv.count("events", len(h.DB.Events), false)
	iv.count("deliveries received", deliveries, false)
	iv.count("missing events", missing, true)
	iv.count("notified, not in the database", unfounded, true)
	iv.count("notified twice", twice, true)
	iv.count("undelivered", undelivered, true)
	if h.EndpointEvents != nil {
		iv.count("missed by the API endpoint", missed, true)
		iv.count("outside its filter", unfiltered, true)
	}
	iv.count("delivered to another merchant", misrouted, true)
	iv.count("delivered other than recorded", altered, true)
	iv.count("delivery failed for good", failed, true)
	iv.count("received, not in the database", phantom, true)
	return iv
}

func checkLedger(h *History) *Invariant {
	iv := &Invariant{Name: InvLedger}
	var mismatches, pendingLeft, refundSum int
	succeeded := map[string]int64{}
	pending := map[string]int64{}
	for _, r := range h.DB.Refunds {
		switch r.Status {
		case "SUCCEEDED":
			succeeded[r.OrderNo] += r.Amount
		case "PENDING":
			pending[r.OrderNo] += r.Amount
			pendingLeft++
		}
	}
	for no, o := range h.DB.Orders {
		want := int64(0)
		if paidStates[o.Status] {
			want = o.Amount
		}
		if got := h.DB.LedgerPayments[no]; got != want {
			mismatches++
			iv.violation("order %s (%s, %d): ledger payments %d", no, o.Status, o.Amount, got)
		}
		if got := h.DB.LedgerRefunds[no]; got != o.Refunded {
			mismatches++
			iv.violation("order %s: ledger refunds %d, refunded_amount %d", no, got, o.Refunded)
		}
		if succeeded[no] != o.Refunded || pending[no] != o.Pending {
			refundSum++
			iv.violation("order %s: refunds succeeded %d pending %d, order says %d and %d", no, succeeded[no], pending[no], o.Refunded, o.Pending)
		}
		if o.Refunded+o.Pending > o.Amount {
			mismatches++
			iv.violation("order %s refunds %d+%d above its amount %d", no, o.Refunded, o.Pending, o.Amount)
		}
		if o.Status == "REFUNDED" && o.Refunded != o.Amount || o.Status == "PARTIALLY_REFUNDED" && (o.Refunded == 0 || o.Refunded >= o.Amount) {
			mismatches++
			iv.violation("order %s is %s with %d of %d refunded", no, o.Status, o.Refunded, o.Amount)
		}
	}
	// The loop above reads the ledger by order: an entry booked for an
	// order that is not there (its creation rolled back, say) is money
	// the orders do not account for.
	for _, sums := range []map[string]int64{h.DB.LedgerPayments, h.DB.LedgerRefunds} {
		for no, sum := range sums {
			if _, ok := h.DB.Orders[no]; !ok {
				mismatches++
				iv.violation("ledger entries of %d for order %s, which the database does not hold", sum, no)
			}
		}
	}
	iv.count("orders", len(h.DB.Orders), false)
	iv.count("money mismatches", mismatches, true)
	iv.count("refund sums differ from the order", refundSum, true)
	iv.count("refunds still pending", pendingLeft, true)
	return iv
}

func checkReconcile(h *History) *Invariant {
	iv := &Invariant{Name: InvReconcile}
	findings := 0
	if h.ReconcileCode != 0 {
		findings = max(1, strings.Count(strings.TrimSpace(h.ReconcileOutput), "\n"))
		iv.violation("exit %d: %.400s", h.ReconcileCode, h.ReconcileOutput)
	}
	iv.count("findings", findings, true)
	return iv
}

func checkNo500(h *History) *Invariant {
	iv := &Invariant{Name: InvNo500}
	var merchant500, other5xx int
	for _, op := range h.Ops {
		for _, s := range op.Statuses {
			switch {
			case s == 500:
				merchant500++
				iv.violation("%s %s key %s: answered 500", op.Kind, op.Merchant, op.Key)
			case s >= 500:
				other5xx++
			}
		}
	}
	cb500 := int(h.Callbacks.ByStatus[500])
	if cb500 > 0 {
		iv.violation("provider callbacks answered 500 %d times", cb500)
	}
	if h.Server500 > 0 {
		iv.violation("the instances' access logs show %d answers of 500", h.Server500)
	}
	for _, p := range h.Panics {
		iv.violation("panic: %s", p)
	}
	iv.count("500s to merchants", merchant500, true)
	iv.count("500s to the provider", cb500, true)
	iv.count("500s in the access logs", h.Server500, true)
	iv.count("panics", len(h.Panics), true)
	iv.count("503s and other 5xx (allowed)", other5xx+int(h.Callbacks.ByStatus[503]), false)
	return iv
}

func checkRevoked(h *History) *Invariant {
	iv := &Invariant{Name: InvRevoked}
	if h.RevokedAccepted > 0 {
		iv.violation("%d of %d requests with the revoked key were not refused", h.RevokedAccepted, h.RevokedProbes)
	}
	unprobed := 0
	if h.RevokedProbes == 0 {
		unprobed = 1
		iv.violation("the revoked key was never sent after its revocation: nothing was checked")
	}
	iv.count("probes after revocation", h.RevokedProbes, false)
	iv.count("accepted", h.RevokedAccepted, true)
	iv.count("never probed", unprobed, true)
	return iv
}

func checkAlive(h *History) *Invariant {
	iv := &Invariant{Name: InvAlive}
	for _, e := range h.Exits {
		iv.violation("%s", e)
	}
	iv.count("exits", len(h.Exits), true)
	return iv
}

func checkQuiet(h *History) *Invariant {
	iv := &Invariant{Name: InvQuiet}
	n := 0
	if !h.Quiet {
		n = 1
		iv.violation("still busy: %s", h.Unsettled)
	}
	iv.count("not settled", n, true)
	return iv
}

// percentile is the p-th percentile (0..1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}
