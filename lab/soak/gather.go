package soak

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// waitQuiet waits until nothing is pending: no event awaiting its fan-out
// and no delivery awaiting its attempt,
// no provider call not yet done or failed, no refund awaiting its
// provider's callback, no order still CREATED (the sweep has expired every
// one, or found its payment at the provider: a payment whose callback was
// lost is recovered only then), and the provider's own callbacks sent.
func (s *system) waitQuiet(ctx context.Context, t *traffic) (bool, string) {
	conn, err := sql.Open("mysql", s.checkerDSN())
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	deadline := time.Now().Add(s.cfg.QuietWithin)
	last := ""
	for {
		var events, calls, refunds, created int
		qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := conn.QueryRowContext(qctx, `SELECT
			(SELECT COUNT(*) FROM events WHERE next_attempt_at IS NOT NULL) +
			(SELECT COUNT(*) FROM deliveries WHERE status = 1),
			(SELECT COUNT(*) FROM provider_calls WHERE status = 0),
			(SELECT COUNT(*) FROM refunds WHERE status = 'PENDING'),
			(SELECT COUNT(*) FROM orders WHERE status = 'CREATED')`).Scan(&events, &calls, &refunds, &created)
		cancel()
		if err == nil {
			last = fmt.Sprintf("%d events or deliveries pending, %d provider calls pending, %d refunds awaiting their callback, %d orders not yet paid or expired",
				events, calls, refunds, created)
			if events == 0 && calls == 0 && refunds == 0 && created == 0 {
				s.api.Wait()
				return true, ""
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, last
		}
		time.Sleep(time.Second)
	}
}

// gather fills h with what the run saw and what the database holds.
func (s *system) gather(ctx context.Context, t *traffic, h *History) error {
	for _, op := range t.snapshotOps() {
		h.Ops = append(h.Ops, *op)
	}
	st := t.sender.Stats()
	h.Callbacks = CallbackStats{Deliveries: st.Events, Attempts: st.Attempts, ByStatus: map[int]int64{}, ByResult: map[string]int64{},
		GaveUp: st.GaveUp, Published: t.published.Load()}
	for _, x := range []map[int]int64{st.ByStatus, s.refundSender.Stats().ByStatus} {
		for k, v := range x {
			h.Callbacks.ByStatus[k] += v
		}
	}
	for k, v := range st.ByResult {
		h.Callbacks.ByResult[k] += v
	}
	for k, v := range st.ReplayedResults {
		h.Callbacks.ByResult[k+" (replayed)"] += v
	}
	h.Provider = ProviderRecord{Payments: map[string]ProviderPayment{}, Refunds: map[string]ProviderRefund{}}
	for _, p := range s.api.PaymentRecords() {
		h.Provider.Payments[p.TxnID] = ProviderPayment{TxnID: p.TxnID, OrderNo: p.OrderNo, Amount: p.Amount, Succeeded: p.Succeeded}
	}
	for _, r := range s.api.RefundRecords() {
		pr := ProviderRefund{Key: r.Key, Calls: r.Calls, PaymentTxnID: r.PaymentTxnID, Amount: r.Amount, Reference: r.Reference}
		if r.Made {
			pr.Moves = 1
		}
		h.Provider.Refunds[r.Key] = pr
	}
	h.Received = s.receiver.snapshot()
	h.EndpointEvents = endpointEvents
	h.RevokedProbes, h.RevokedAccepted = int(t.probes.Load()), int(t.probeAccepted.Load())
	if err := s.snapshot(ctx, &h.DB); err != nil {
		return fmt.Errorf("read the database: %w", err)
	}
	out, err := s.paysvc(ctx, 0, "reconcile")
	h.ReconcileOutput = out
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		h.ReconcileCode = ee.ExitCode()
	default:
		return fmt.Errorf("paysvc reconcile: %w", err)
	}
	for _, p := range s.serves {
		h.Exits = append(h.Exits, p.ownExits()...)
	}
	for i := range instances {
		n, panics, err := scanServeLog(filepath.Join(s.dir, fmt.Sprintf("serve-%d.log", i+1)))
		if err != nil {
			return err
		}
		h.Server500 += n
		h.Panics = append(h.Panics, panics...)
	}
	return nil
}

// snapshot reads the rows the checks need.
func (s *system) snapshot(ctx context.Context, d *Snapshot) error {
	conn, err := sql.Open("mysql", s.checkerDSN())
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	d.Orders, d.Refunds = map[string]DBOrder{}, map[string]DBRefund{}
	d.OrdersByRef, d.RefundsByRef = map[string]int{}, map[string]int{}
	d.LedgerPayments, d.LedgerRefunds = map[string]int64{}, map[string]int64{}
	d.CallKeys, d.AutoSettled = map[string]string{}, map[string]string{}
	rows := func(q string, scan func(*sql.Rows) error) error {
		r, err := conn.QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		defer r.Close()
		for r.Next() {
			if err := scan(r); err != nil {
				return err
			}
		}
		return r.Err()
	}
	err = rows(`SELECT order_no, merchant_id, merchant_order_no, status, amount, refunded_amount, pending_refund_amount FROM orders`, func(r *sql.Rows) error {
		var o DBOrder
		if err := r.Scan(&o.OrderNo, &o.Merchant, &o.MerchantOrderNo, &o.Status, &o.Amount, &o.Refunded, &o.Pending); err != nil {
			return err
		}
		d.Orders[o.OrderNo] = o
		d.OrdersByRef[o.Merchant+"/"+o.MerchantOrderNo]++
		return nil
	})
	if err == nil {
		err = rows(`SELECT txn_id, order_no, status, result, amount FROM payments`, func(r *sql.Rows) error {
			var p DBPayment
			if err := r.Scan(&p.TxnID, &p.OrderNo, &p.Status, &p.Result, &p.Amount); err != nil {
				return err
			}
			d.Payments = append(d.Payments, p)
			return nil
		})
	}
	if err == nil {
		err = rows(`SELECT refund_no, order_no, merchant_id, merchant_refund_no, status, amount FROM refunds`, func(r *sql.Rows) error {
			var x DBRefund
			if err := r.Scan(&x.RefundNo, &x.OrderNo, &x.Merchant, &x.MerchantRefundNo, &x.Status, &x.Amount); err != nil {
				return err
			}
			d.Refunds[x.RefundNo] = x
			d.RefundsByRef[x.Merchant+"/"+x.MerchantRefundNo]++
			return nil
		})
	}
	if err == nil {
		err = rows(`SELECT order_no, kind, SUM(amount) FROM ledger_entries GROUP BY order_no, kind`, func(r *sql.Rows) error {
			var no, kind string
			var sum int64
			if err := r.Scan(&no, &kind, &sum); err != nil {
				return err
			}
			switch kind {
			case "payment":
				d.LedgerPayments[no] += sum
			case "refund":
				d.LedgerRefunds[no] += sum
			}
			return nil
		})
	}
	if err == nil {
		err = rows(`SELECT id, merchant_id, type, data, `+eventDelivery+` FROM events`, func(r *sql.Rows) error {
			var e DBEvent
			var data []byte
			if err := r.Scan(&e.ID, &e.Merchant, &e.Type, &data, &e.Delivery); err != nil {
				return err
			}
			var v struct {
				Order struct {
					OrderNo string `json:"order_no"`
				} `json:"order"`
				Refund *struct {
					RefundNo string `json:"refund_no"`
				} `json:"refund"`
				Payment *struct {
					TxnID string `json:"txn_id"`
				} `json:"payment"`
			}
			if err := json.Unmarshal(data, &v); err != nil {
				return fmt.Errorf("event %s: data: %w", e.ID, err)
			}
			e.OrderNo = v.Order.OrderNo
			if v.Refund != nil {
				e.RefundNo = v.Refund.RefundNo
			}
			if v.Payment != nil {
				e.PaymentTxn = v.Payment.TxnID
			}
			d.Events = append(d.Events, e)
			return nil
		})
	}
	if err == nil {
		err = rows(`SELECT idem_key, refund_no, status, kind, COALESCE(settled, '') FROM provider_calls`, func(r *sql.Rows) error {
			var k, no, settled string
			var st, kind int
			if err := r.Scan(&k, &no, &st, &kind, &settled); err != nil {
				return err
			}
			d.CallKeys[k] = no
			if kind == 1 {
				d.AutoSettled[k] = settled
			}
			if st == 0 {
				d.PendingCalls++
			}
			return nil
		})
	}
	return err
}

// eventDelivery is an event's delivery status as GET /v1/events/{id}
// reports it (events.deliveryOf): pending while it awaits its fan-out or
// a delivery is pending, else failed when any delivery failed, else
// delivered when any was, else the stored status.
const eventDelivery = `CASE WHEN events.next_attempt_at IS NOT NULL THEN 1
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 1) THEN 1
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 3) THEN 3
  WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = events.id AND d.status = 2) THEN 2
  ELSE events.delivery END`
