package orders

import (
	"context"

	"gorm.io/gorm"
)

// Outbox records the event of an order change in the transaction that
// makes it (a transactional outbox); package events implements it. It is called only
// after the change happened, so a refusal writes no event, and with the
// change's tx, so a rollback takes the event with it.
type Outbox interface {
	// OrderClosed: o is the order as it is now (CLOSED); reason is
	// "cancelled" or "expired".
	OrderClosed(ctx context.Context, tx *gorm.DB, o Order, reason string) error
}

// WithOutbox makes s record its changes in ob; without one (tests of other
// packages, tools) no events are written. It returns s, for wiring.
func (s *Service) WithOutbox(ob Outbox) *Service {
	s.outbox = ob
	return s
}
