package payments

import (
	"context"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/orders"
)

// A refund callback whose amount or currency is not the refund's says the
// provider moved, or failed to move, a sum nobody asked for. That is
// money to look at, not a stale event to drop: the refund leaves PENDING
// for MISMATCHED with what the provider reported, keeping its reservation
// (see RefundMismatched), refund.mismatched tells the merchant, and
// reconcile lists it as a finding. The callback is answered
// amount_mismatch.

// refundMismatched records such a callback for a merchant refund r of o
// (both locked by the caller). The same report again (its record expired)
// answers the same and writes nothing; a report that contradicts a refund
// already settled, or already under review, is logged only: that refund
// is final, or already waits for a person. 1 UPDATE and the event INSERT.
func (s *Service) refundMismatched(ctx context.Context, tx *gorm.DB, provider string, o orders.Order, r Refund, ev Event) (Result, error) {
	rep := reported(provider, ev)
	if r.Status != RefundPending {
		if r.Status != RefundMismatched || r.Provider != provider || r.TxnID != ev.TxnID {
			s.log.WarnContext(ctx, "refund event with another amount for a refund no longer pending; not applied",
				"provider", provider, "txn_id", ev.TxnID, "refund_no", r.RefundNo, "order_no", o.OrderNo, "refund_status", r.Status)
		}
		return AmountMismatch, nil
	}
	ok, err := mismatchRefundRow(ctx, tx, r.RefundNo, rep, s.at())
	if err != nil {
		return "", err
	}
	if !ok {
		s.log.WarnContext(ctx, "refund event with another amount from a transaction that settled another refund; not applied",
			"provider", provider, "txn_id", ev.TxnID, "refund_no", r.RefundNo, "order_no", o.OrderNo)
		return AmountMismatch, nil
	}
	s.log.WarnContext(ctx, "refund settled with another amount than asked; kept for review", "provider", provider,
		"txn_id", ev.TxnID, "refund_no", r.RefundNo, "order_no", o.OrderNo, "asked", r.Amount, "currency", o.Currency,
		"reported", ev.Amount, "reported_currency", ev.Currency, "reported_status", rep.Status)
	r.Status, r.Provider, r.TxnID = RefundMismatched, provider, ev.TxnID
	if s.outbox != nil {
		if err := s.outbox.RefundMismatched(ctx, tx, o, r, rep); err != nil {
			return "", err
		}
	}
	return AmountMismatch, nil
}

// autoRefundMismatched records such a callback for the automatic refund r
// (locked by the caller) of a payment on o: settled MISMATCHED with what
// was reported. Repeats and contradictions are answered as for a
// merchant refund. 1 UPDATE, the payment's read and the event INSERT.
func (s *Service) autoRefundMismatched(ctx context.Context, tx *gorm.DB, o orders.Order, r AutoRefund, ev Event) (Result, error) {
	if r.Settled != "" {
		if r.Settled != RefundMismatched || r.SettledTxnID != ev.TxnID {
			s.log.WarnContext(ctx, "refund event with another amount for an automatic refund already settled; not applied",
				"provider", r.Provider, "txn_id", ev.TxnID, "refund_no", r.RefundNo, "order_no", o.OrderNo, "settled", r.Settled)
		}
		return AmountMismatch, nil
	}
	rep := reported(r.Provider, ev)
	if err := s.calls.MismatchAutoRefund(ctx, tx, r.ID, rep); err != nil {
		return "", err
	}
	s.log.WarnContext(ctx, "automatic refund settled with another amount than asked; kept for review", "provider", r.Provider,
		"txn_id", ev.TxnID, "refund_no", r.RefundNo, "order_no", o.OrderNo, "asked", r.Amount, "currency", r.Currency,
		"reported", ev.Amount, "reported_currency", ev.Currency, "reported_status", rep.Status)
	if s.outbox != nil {
		p, err := s.autoRefunded(ctx, tx, r, RefundMismatched)
		if err != nil {
			return "", err
		}
		if err := s.outbox.AutoRefundMismatched(ctx, tx, o, p, rep); err != nil {
			return "", err
		}
	}
	return AmountMismatch, nil
}

func reported(provider string, ev Event) Reported {
	return Reported{Provider: provider, TxnID: ev.TxnID, Status: settledStatus(ev.Type), Amount: ev.Amount, Currency: ev.Currency}
}
