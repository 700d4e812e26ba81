package orders

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"
)

// NewOrderNo returns a fresh order number: "ord_" and a ULID, 30 characters,
// unique across instances without coordination and time-ordered so that
// inserts append to the primary key instead of splitting pages.
func NewOrderNo() string { return "ord_" + ulid.Make().String() }

// CreateInput is a validated create request.
type CreateInput struct {
	MerchantOrderNo string
	Amount          int64
	Currency        string
	Description     string
}

// Service is the order business logic. Its methods run inside the
// transaction they are given: for merchant requests the idempotency engine
// opens it, so that the order and the stored response commit together.
type Service struct {
	now     func() time.Time
	orderNo func() string
	outbox  Outbox        // nil: no events
	ttl     time.Duration // PAYSVC_ORDER_TTL; 0: orders never expire
}

// NewService returns a Service; nil arguments take time.Now and NewOrderNo.
func NewService(now func() time.Time, orderNo func() string) *Service {
	if now == nil {
		now = time.Now
	}
	if orderNo == nil {
		orderNo = NewOrderNo
	}
	return &Service{now: now, orderNo: orderNo}
}

// Create inserts a new CREATED order. 1 statement.
func (s *Service) Create(ctx context.Context, tx *gorm.DB, merchantID string, in CreateInput) (Order, error) {
	// MariaDB keeps microseconds: truncate so the returned order equals
	// what a later read returns.
	now := s.now().UTC().Truncate(time.Microsecond)
	o := Order{
		OrderNo:         s.orderNo(),
		MerchantID:      merchantID,
		MerchantOrderNo: in.MerchantOrderNo,
		Status:          Created,
		Amount:          in.Amount,
		Currency:        in.Currency,
		Description:     in.Description,
		Version:         1,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	if s.ttl > 0 {
		exp := now.Add(s.ttl)
		o.ExpiresAt = &exp
	}
	if err := Insert(ctx, tx, o); err != nil {
		return Order{}, err
	}
	return o, nil
}

// WithTTL makes new orders expire ttl after creation (PAYSVC_ORDER_TTL;
// 0: never). It returns s, for wiring.
func (s *Service) WithTTL(ttl time.Duration) *Service {
	s.ttl = ttl
	return s
}

// Expire closes an overdue CREATED order (package sweep) by the same
// conditional UPDATE as a cancel, with order.closed (reason expired);
// false when it is no longer CREATED (a payment or a cancel came first).
// With an outbox the closed order is read back after the UPDATE
// (ApplyAndGet), for the event.
func (s *Service) Expire(ctx context.Context, tx *gorm.DB, orderNo string) (bool, error) {
	t := Transition{OrderNo: orderNo, From: Created, To: Closed, At: s.now().UTC()}
	if s.outbox == nil {
		err := t.Apply(ctx, tx)
		if errors.Is(err, ErrIllegalTransition) {
			return false, nil
		}
		return err == nil, err
	}
	o, err := t.ApplyAndGet(ctx, tx)
	if errors.Is(err, ErrIllegalTransition) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := s.outbox.OrderClosed(ctx, tx, o, "expired"); err != nil {
		return false, err
	}
	return true, nil
}

// Cancel closes a CREATED order. 2 statements when it applies: the
// conditional UPDATE and the read of the row it left (ApplyAndGet), to
// answer; with an outbox, a third: the order.closed event's INSERT. A
// refusal reads the row again to tell 404 from 409.
func (s *Service) Cancel(ctx context.Context, tx *gorm.DB, merchantID, orderNo string) (Order, error) {
	t := Transition{OrderNo: orderNo, MerchantID: merchantID, From: Created, To: Closed, At: s.now().UTC()}
	o, terr := t.ApplyAndGet(ctx, tx)
	if terr != nil {
		if !errors.Is(terr, ErrIllegalTransition) {
			return Order{}, terr
		}
		o, err := Get(ctx, tx, merchantID, orderNo)
		if err != nil {
			return Order{}, err
		}
		return o, fmt.Errorf("cancel order %s in state %s: %w", orderNo, o.Status, ErrIllegalTransition)
	}
	if s.outbox != nil {
		if err := s.outbox.OrderClosed(ctx, tx, o, "cancelled"); err != nil {
			return Order{}, err
		}
	}
	return o, nil
}
