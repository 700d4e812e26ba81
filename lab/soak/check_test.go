package soak

import (
	"slices"
	"strings"
	"testing"
)

// goodHistory is a small run in which every invariant holds: order o1 paid
// and partly refunded, o2 cancelled, o3 paid twice (the second payment
// flagged and refunded automatically).
func goodHistory() *History {
	created := []byte(`{"order_no":"o1"}`)
	refunded := []byte(`{"refund_no":"rf1"}`)
	h := &History{
		Ops: []Op{
			{Kind: "create", Merchant: "m", Key: "k1", MerchantOrderNo: "mo1", OrderNo: "o1", Amount: 1000, Final: true, Status: 201,
				Body: created, Statuses: []int{503, 201}, Recheck: &Answer{Status: 201, Body: created, Replayed: true}},
			{Kind: "refund", Merchant: "m", Key: "k2", MerchantRefundNo: "mr1", OrderNo: "o1", RefundNo: "rf1", Amount: 300, Final: true,
				Status: 201, Body: refunded, Statuses: []int{201}, Recheck: &Answer{Status: 201, Body: refunded, Replayed: true}},
			{Kind: "cancel", Merchant: "m", Key: "k3", OrderNo: "o2", Final: true, Status: 200, Body: []byte(`{}`), Statuses: []int{200},
				Recheck: &Answer{Status: 200, Body: []byte(`{}`), Replayed: true}},
		},
		Callbacks: CallbackStats{ByStatus: map[int]int64{200: 5, 503: 1}},
		Provider: ProviderRecord{
			Payments: map[string]ProviderPayment{
				"t1": {TxnID: "t1", OrderNo: "o1", Amount: 1000, Succeeded: true},
				"t3": {TxnID: "t3", OrderNo: "o3", Amount: 500, Succeeded: true},
				"t4": {TxnID: "t4", OrderNo: "o3", Amount: 500, Succeeded: true},
			},
			Refunds: map[string]ProviderRefund{
				"rf1":             {Key: "rf1", Calls: 2, Moves: 1, PaymentTxnID: "t1", Amount: 300, Reference: "rf1"},
				"auto:mockpay:t4": {Key: "auto:mockpay:t4", Calls: 1, Moves: 1, PaymentTxnID: "t4", Amount: 500, Reference: "ar1"},
			},
		},
		Received: map[string]Received{
			"e1":  {Type: "order.paid", OrderNo: "o1", Deliveries: 1, EndpointDeliveries: 1, Merchants: []string{"m"}},
			"e2":  {Type: "order.closed", OrderNo: "o2", Deliveries: 2, Merchants: []string{"m"}},
			"e3":  {Type: "refund.succeeded", OrderNo: "o1", Deliveries: 1, EndpointDeliveries: 2, Merchants: []string{"m"}},
			"e4":  {Type: "order.partially_refunded", OrderNo: "o1", Deliveries: 1, Merchants: []string{"m"}},
			"e5":  {Type: "order.paid", OrderNo: "o3", Deliveries: 1, EndpointDeliveries: 1, Merchants: []string{"m"}},
			"e6":  {Type: "payment.flagged", OrderNo: "o3", Deliveries: 1, EndpointDeliveries: 1, Merchants: []string{"m"}},
			"e10": {Type: "payment.refunded", OrderNo: "o3", Deliveries: 1, Merchants: []string{"m"}},
		},
		EndpointEvents: []string{"order.paid", "refund.succeeded", "payment.flagged"},
		DB: Snapshot{
			Orders: map[string]DBOrder{
				"o1": {OrderNo: "o1", Merchant: "m", MerchantOrderNo: "mo1", Status: "PARTIALLY_REFUNDED", Amount: 1000, Refunded: 300},
				"o2": {OrderNo: "o2", Merchant: "m", MerchantOrderNo: "mo2", Status: "CLOSED", Amount: 700},
				"o3": {OrderNo: "o3", Merchant: "m", MerchantOrderNo: "mo3", Status: "PAID", Amount: 500},
			},
			Payments: []DBPayment{
				{TxnID: "t1", OrderNo: "o1", Status: "SUCCEEDED", Result: "applied", Amount: 1000},
				{TxnID: "t3", OrderNo: "o3", Status: "SUCCEEDED", Result: "applied", Amount: 500},
				{TxnID: "t4", OrderNo: "o3", Status: "SUCCEEDED", Result: "duplicate_payment", Amount: 500},
			},
			Refunds: map[string]DBRefund{"rf1": {RefundNo: "rf1", OrderNo: "o1", Merchant: "m", MerchantRefundNo: "mr1", Status: "SUCCEEDED", Amount: 300}},
			Events: []DBEvent{
				{ID: "e1", Merchant: "m", Type: "order.paid", OrderNo: "o1", Delivery: 2},
				{ID: "e2", Merchant: "m", Type: "order.closed", OrderNo: "o2", Delivery: 2},
				{ID: "e3", Merchant: "m", Type: "refund.succeeded", OrderNo: "o1", RefundNo: "rf1", Delivery: 2},
				{ID: "e4", Merchant: "m", Type: "order.partially_refunded", OrderNo: "o1", RefundNo: "rf1", Delivery: 2},
				{ID: "e5", Merchant: "m", Type: "order.paid", OrderNo: "o3", Delivery: 2},
				{ID: "e6", Merchant: "m", Type: "payment.flagged", OrderNo: "o3", PaymentTxn: "t4", Delivery: 2},
				{ID: "e10", Merchant: "m", Type: "payment.refunded", OrderNo: "o3", PaymentTxn: "t4", Delivery: 2},
			},
			LedgerPayments: map[string]int64{"o1": 1000, "o3": 500},
			LedgerRefunds:  map[string]int64{"o1": 300},
			OrdersByRef:    map[string]int{"m/mo1": 1, "m/mo2": 1, "m/mo3": 1},
			RefundsByRef:   map[string]int{"m/mr1": 1},
			AutoSettled:    map[string]string{"auto:mockpay:t4": "SUCCEEDED"},
		},
		RevokedProbes: 4,
		Quiet:         true,
	}
	return h
}

func TestCheckGoodHistoryHolds(t *testing.T) {
	for _, iv := range Check(goodHistory()) {
		if !iv.OK() {
			t.Errorf("%s: does not hold on a good history: %v %v", iv.Name, iv.Counts, iv.Violations)
		}
	}
}

// TestCheckCatchesEachViolation doctors the good history once per way a
// promise can break and expects exactly the invariant that covers it to
// fail, with the count named.
func TestCheckCatchesEachViolation(t *testing.T) {
	cases := []struct {
		name      string
		invariant string
		count     string
		doctor    func(h *History)
	}{
		{"an acknowledged order is lost", InvAcknowledged, "lost", func(h *History) {
			delete(h.DB.Orders, "o1")
			delete(h.DB.OrdersByRef, "m/mo1")
		}},
		{"a create answered with another order of the merchant", InvAcknowledged, "lost", func(h *History) {
			h.Ops[0].OrderNo = "o3"
			h.Ops[0].Amount = 500
		}},
		{"an order exists twice", InvAcknowledged, "doubled", func(h *History) { h.DB.OrdersByRef["m/mo1"] = 2 }},
		{"an acknowledged refund is lost", InvAcknowledged, "lost", func(h *History) {
			delete(h.DB.Refunds, "rf1")
			delete(h.DB.RefundsByRef, "m/mr1")
		}},
		{"an acknowledged refund recorded against another order", InvAcknowledged, "lost", func(h *History) {
			r := h.DB.Refunds["rf1"]
			r.OrderNo = "o3"
			h.DB.Refunds["rf1"] = r
		}},
		{"a cancel answered 200 did not close the order", InvAcknowledged, "lost", func(h *History) {
			o := h.DB.Orders["o2"]
			o.Status = "PAID"
			h.DB.Orders["o2"] = o
		}},
		{"a replay differs from the first answer", InvAcknowledged, "replay differs", func(h *History) {
			h.Ops[0].Recheck = &Answer{Status: 201, Body: []byte(`{"order_no":"o9"}`), Replayed: true}
		}},
		{"a repeated request ran again", InvAcknowledged, "ran again", func(h *History) { h.Ops[1].Recheck.Replayed = false }},
		{"a refused refund was written", InvAcknowledged, "refused, yet written", func(h *History) {
			body := []byte(`{"code":"refund_exceeds_amount"}`)
			h.Ops = append(h.Ops, Op{Kind: "refund", Merchant: "m", Key: "k4", MerchantRefundNo: "mr2", OrderNo: "o1", Amount: 5000,
				Final: true, Status: 422, Code: "refund_exceeds_amount", Body: body, Statuses: []int{422},
				Recheck: &Answer{Status: 422, Body: body, Replayed: true}})
			h.DB.RefundsByRef["m/mr2"] = 1
		}},
		{"a payment applied twice", InvPayments, "doubled", func(h *History) {
			h.DB.Payments = append(h.DB.Payments, DBPayment{TxnID: "t2", OrderNo: "o1", Status: "SUCCEEDED", Result: "applied", Amount: 1000})
		}},
		{"a paid order without its payment", InvPayments, "paid without one applied payment", func(h *History) {
			h.DB.Payments = h.DB.Payments[1:]
			h.Provider.Payments = map[string]ProviderPayment{}
		}},
		{"a payment the provider took is missing", InvPayments, "provider payments missing", func(h *History) {
			h.Provider.Payments["t9"] = ProviderPayment{TxnID: "t9", OrderNo: "o2", Amount: 700, Succeeded: true}
		}},
		{"a payment applied for another amount than its order's", InvPayments, "disagrees with the provider or its order", func(h *History) {
			h.DB.Payments[0].Amount = 900
			p := h.Provider.Payments["t1"]
			p.Amount = 900
			h.Provider.Payments["t1"] = p
		}},
		{"a payment the provider failed recorded as succeeded", InvPayments, "disagrees with the provider or its order", func(h *History) {
			p := h.Provider.Payments["t1"]
			p.Succeeded = false
			h.Provider.Payments["t1"] = p
		}},
		{"a refund made against another order's payment", InvProvider, "refund of another payment or amount", func(h *History) {
			r := h.Provider.Refunds["rf1"]
			r.PaymentTxnID = "t3"
			h.Provider.Refunds["rf1"] = r
		}},
		{"a refund made for another amount than booked", InvProvider, "refund of another payment or amount", func(h *History) {
			r := h.Provider.Refunds["rf1"]
			r.Amount = 250
			h.Provider.Refunds["rf1"] = r
		}},
		{"an automatic refund made for another amount than the flagged payment", InvProvider, "refund of another payment or amount", func(h *History) {
			r := h.Provider.Refunds["auto:mockpay:t4"]
			r.Amount = 400
			h.Provider.Refunds["auto:mockpay:t4"] = r
		}},
		{"a flagged payment's automatic refund never settled", InvProvider, "automatic refund not settled", func(h *History) {
			delete(h.DB.AutoSettled, "auto:mockpay:t4")
		}},
		{"the provider moved money twice for one key", InvProvider, "moved twice", func(h *History) {
			r := h.Provider.Refunds["rf1"]
			r.Moves = 2
			h.Provider.Refunds["rf1"] = r
		}},
		{"one refund made under two keys", InvProvider, "one refund under two keys", func(h *History) {
			h.Provider.Refunds["rf1-again"] = ProviderRefund{Key: "rf1-again", Calls: 1, Moves: 1, PaymentTxnID: "t1", Amount: 300, Reference: "rf1"}
		}},
		{"a payment refunded above its amount", InvProvider, "over-refunded payments", func(h *History) {
			r := h.Provider.Refunds["rf1"]
			r.Amount = 1001
			h.Provider.Refunds["rf1"] = r
		}},
		{"an accepted refund never asked of the provider", InvProvider, "accepted, never asked", func(h *History) {
			delete(h.Provider.Refunds, "rf1")
		}},
		{"a flagged payment never refunded", InvProvider, "accepted, never asked", func(h *History) {
			delete(h.Provider.Refunds, "auto:mockpay:t4")
		}},
		{"a change without its event", InvEvents, "missing events", func(h *History) {
			h.DB.Events = h.DB.Events[1:]
			delete(h.Received, "e1")
		}},
		{"a flagged payment's automatic refund settled without its event", InvEvents, "missing events", func(h *History) {
			h.DB.Events = slices.DeleteFunc(h.DB.Events, func(e DBEvent) bool { return e.ID == "e10" })
			delete(h.Received, "e10")
		}},
		{"a payment.refunded for an automatic refund not settled", InvEvents, "notified, not in the database", func(h *History) {
			h.DB.AutoSettled["auto:mockpay:t4"] = "FAILED"
		}},
		{"an event never delivered", InvEvents, "undelivered", func(h *History) { delete(h.Received, "e2") }},
		{"an event the API endpoint takes never reached it", InvEvents, "missed by the API endpoint", func(h *History) {
			r := h.Received["e3"]
			r.EndpointDeliveries = 0
			h.Received["e3"] = r
		}},
		{"an event the API endpoint's filter refuses reached it", InvEvents, "outside its filter", func(h *History) {
			r := h.Received["e2"]
			r.EndpointDeliveries = 1
			h.Received["e2"] = r
		}},
		{"an event delivered to another merchant's endpoint", InvEvents, "delivered to another merchant", func(h *History) {
			r := h.Received["e1"]
			r.Merchants = append(r.Merchants, "m2")
			h.Received["e1"] = r
		}},
		{"an event delivered with other content than recorded", InvEvents, "delivered other than recorded", func(h *History) {
			r := h.Received["e2"]
			r.Type = "order.paid"
			h.Received["e2"] = r
		}},
		{"an event whose delivery failed for good", InvEvents, "delivery failed for good", func(h *History) { h.DB.Events[1].Delivery = 3 }},
		{"a delivery of an event the database does not hold", InvEvents, "received, not in the database", func(h *History) {
			h.Received["e99"] = Received{Type: "order.paid", Deliveries: 1}
		}},
		{"the ledger misses a payment", InvLedger, "money mismatches", func(h *History) { h.DB.LedgerPayments["o1"] = 0 }},
		{"a ledger entry of an order the database does not hold", InvLedger, "money mismatches", func(h *History) {
			h.DB.LedgerPayments["o9"] = 400
		}},
		{"the order's refunded amount differs from its refunds", InvLedger, "refund sums differ from the order", func(h *History) {
			r := h.DB.Refunds["rf1"]
			r.Amount = 200
			h.DB.Refunds["rf1"] = r
		}},
		{"a refund left pending", InvLedger, "refunds still pending", func(h *History) {
			h.DB.Refunds["rf2"] = DBRefund{RefundNo: "rf2", OrderNo: "o3", Status: "PENDING", Amount: 100}
		}},
		{"an event for a change the database does not hold", InvEvents, "notified, not in the database", func(h *History) {
			h.DB.Events = append(h.DB.Events, DBEvent{ID: "e7", Merchant: "m", Type: "order.paid", OrderNo: "o2", Delivery: 2})
			h.Received["e7"] = Received{Type: "order.paid", OrderNo: "o2", Deliveries: 1, EndpointDeliveries: 1}
		}},
		{"a refund.succeeded for a refund that failed", InvEvents, "notified, not in the database", func(h *History) {
			h.DB.Refunds["rf2"] = DBRefund{RefundNo: "rf2", OrderNo: "o1", Merchant: "m", MerchantRefundNo: "mr2", Status: "FAILED", Amount: 100}
			h.DB.RefundsByRef["m/mr2"] = 1
			h.DB.Events = append(h.DB.Events,
				DBEvent{ID: "e7", Merchant: "m", Type: "refund.failed", OrderNo: "o1", RefundNo: "rf2", Delivery: 2},
				DBEvent{ID: "e8", Merchant: "m", Type: "refund.succeeded", OrderNo: "o1", RefundNo: "rf2", Delivery: 2})
			h.Received["e7"] = Received{Type: "refund.failed", OrderNo: "o1", Deliveries: 1}
			h.Received["e8"] = Received{Type: "refund.succeeded", OrderNo: "o1", Deliveries: 1, EndpointDeliveries: 1}
		}},
		{"one change notified twice", InvEvents, "notified twice", func(h *History) {
			h.DB.Events = append(h.DB.Events, DBEvent{ID: "e7", Merchant: "m", Type: "order.paid", OrderNo: "o1", Delivery: 2})
			h.Received["e7"] = Received{Type: "order.paid", OrderNo: "o1", Deliveries: 1, EndpointDeliveries: 1}
		}},
		{"the provider made a refund the database failed", InvProvider, "made, not succeeded in the database", func(h *History) {
			h.DB.Refunds["rf2"] = DBRefund{RefundNo: "rf2", OrderNo: "o1", Merchant: "m", MerchantRefundNo: "mr2", Status: "FAILED", Amount: 100}
			h.DB.RefundsByRef["m/mr2"] = 1
			h.Provider.Refunds["rf2"] = ProviderRefund{Key: "rf2", Calls: 1, Moves: 1, PaymentTxnID: "t1", Amount: 100, Reference: "rf2"}
		}},
		{"the provider made a refund the database does not hold", InvProvider, "made, not succeeded in the database", func(h *History) {
			h.Provider.Refunds["rf9"] = ProviderRefund{Key: "rf9", Calls: 1, Moves: 1, PaymentTxnID: "t1", Amount: 100, Reference: "rf9"}
		}},
		{"a succeeded refund whose request got no final answer was never asked of the provider", InvProvider, "accepted, never asked", func(h *History) {
			h.Ops[1].Final = false
			delete(h.Provider.Refunds, "rf1")
		}},
		{"reconcile has findings", InvReconcile, "findings", func(h *History) {
			h.ReconcileCode, h.ReconcileOutput = 1, "order o1 paid twice\n"
		}},
		{"a merchant was answered 500", InvNo500, "500s to merchants", func(h *History) { h.Ops[0].Statuses = []int{500, 201} }},
		{"the provider was answered 500", InvNo500, "500s to the provider", func(h *History) { h.Callbacks.ByStatus[500] = 1 }},
		{"an access log shows a 500", InvNo500, "500s in the access logs", func(h *History) { h.Server500 = 2 }},
		{"an instance panicked", InvNo500, "panics", func(h *History) { h.Panics = []string{"the runtime says: panic: boom"} }},
		{"a revoked key was accepted", InvRevoked, "accepted", func(h *History) { h.RevokedAccepted = 1 }},
		{"the revoked key was never probed", InvRevoked, "never probed", func(h *History) { h.RevokedProbes = 0 }},
		{"an instance exited by itself", InvAlive, "exits", func(h *History) {
			h.Exits = []string{"serve-2 exited by itself: exit status 1"}
		}},
		{"the system never went quiet", InvQuiet, "not settled", func(h *History) {
			h.Quiet, h.Unsettled = false, "3 events pending delivery"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := goodHistory()
			c.doctor(h)
			for _, iv := range Check(h) {
				if iv.Name != c.invariant {
					continue
				}
				if iv.OK() {
					t.Fatalf("%s holds on a doctored history: %v", iv.Name, iv.Counts)
				}
				bad := false
				for _, n := range iv.Counts {
					if n.Label == c.count && n.Bad && n.N > 0 {
						bad = true
					}
				}
				if !bad {
					t.Errorf("%s failed, but not by %q: %v", iv.Name, c.count, iv.Counts)
				}
				if len(iv.Violations) == 0 || strings.TrimSpace(iv.Violations[0]) == "" {
					t.Errorf("%s failed without naming a violation", iv.Name)
				}
				return
			}
			t.Fatalf("no invariant %q", c.invariant)
		})
	}
}
