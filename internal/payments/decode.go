package payments

import (
	"fmt"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/validate"
)

// Limits on provider identifiers. txn_id becomes part of the derived
// idempotency key, so it is printable ASCII without spaces.
const (
	maxRef = 64
	// maxType is the longest event type accepted: Stripe's longest run to
	// about 45 characters.
	maxType = 64
)

// DecodeEvent reads a callback body: {"type": ..., "data": {...}}. Unknown
// fields are allowed at both levels (providers add fields), but the ones we
// use must be well-formed. It returns the event and the canonical form of
// data, the callback's fingerprint input. A well-formed event of a type not
// handled here is ErrUnhandledType; every other error is a validate.Error.
func DecodeEvent(body []byte) (Event, []byte, error) {
	tree, err := canonjson.Parse(body)
	if err != nil {
		return Event{}, nil, validate.Invalid("", err.Error())
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return Event{}, nil, validate.Invalid("", "callback body must be a JSON object")
	}
	// Any other non-empty type, whatever its length or characters, is
	// acknowledged as unhandled: only the handled ones are read further.
	switch raw, _ := root["type"].(string); EventType(raw) {
	case PaymentSucceeded, PaymentFailed, RefundSucceeded, RefundFailed:
	default:
		if raw != "" {
			return Event{}, nil, fmt.Errorf("event type %s: %w", validate.Quote(raw), ErrUnhandledType)
		}
	}
	f := validate.New(root, "")
	typ := EventType(f.Text("type", true, maxType))
	if err := f.Err(); err != nil {
		return Event{}, nil, err
	}
	data, ok := root["data"].(map[string]any)
	if !ok {
		return Event{}, nil, validate.Invalid("data", "is required and must be an object")
	}
	d := validate.New(data, "data.")
	ev := Event{
		Type:     typ,
		OrderNo:  d.Text("order_no", true, maxRef),
		TxnID:    d.Text("txn_id", true, maxRef),
		Amount:   d.Amount("amount"),
		Currency: d.Currency("currency"),
	}
	if typ.IsRefund() {
		ev.RefundNo = d.Text("refund_no", true, maxRef)
	}
	if err := d.Err(); err != nil {
		return Event{}, nil, err
	}
	for i := 0; i < len(ev.TxnID); i++ {
		if ev.TxnID[i] <= ' ' || ev.TxnID[i] > '~' {
			return Event{}, nil, validate.Invalid("data.txn_id", "must be printable ASCII without spaces")
		}
	}
	return ev, canonjson.Append(nil, data), nil
}
