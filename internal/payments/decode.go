package payments

import (
	"encoding/json"
	"fmt"
	"strconv"

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
// use must be well-formed. A well-formed event of a type not handled here
// is ErrUnhandledType; every other error is a validate.Error. Every
// provider event passes through it, whatever brought it: the Standard
// Webhooks body as it is, another adapter's webhook once mapped, and a
// payment the order sweep found through a status query (see EventBody),
// so that nothing is applied that a callback could not carry.
func DecodeEvent(body []byte) (Event, error) {
	tree, err := canonjson.Parse(body)
	if err != nil {
		return Event{}, validate.Invalid("", err.Error())
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return Event{}, validate.Invalid("", "callback body must be a JSON object")
	}
	// Any other non-empty type, whatever its length or characters, is
	// acknowledged as unhandled: only the handled ones are read further.
	switch raw, _ := root["type"].(string); EventType(raw) {
	case PaymentSucceeded, PaymentFailed, RefundSucceeded, RefundFailed:
	default:
		if raw != "" {
			return Event{}, fmt.Errorf("event type %s: %w", validate.Quote(raw), ErrUnhandledType)
		}
	}
	f := validate.New(root, "")
	typ := EventType(f.Text("type", true, maxType))
	if err := f.Err(); err != nil {
		return Event{}, err
	}
	data, ok := root["data"].(map[string]any)
	if !ok {
		return Event{}, validate.Invalid("data", "is required and must be an object")
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
		return Event{}, err
	}
	for i := 0; i < len(ev.TxnID); i++ {
		if ev.TxnID[i] <= ' ' || ev.TxnID[i] > '~' {
			return Event{}, validate.Invalid("data.txn_id", "must be printable ASCII without spaces")
		}
	}
	return ev, nil
}

// EventData is the canonical JSON of an event's data as mapped to the
// fields a callback carries — {order_no, txn_id, amount, currency}, plus
// refund_no for refund events — and nothing else: the input of the
// callback's fingerprint. Fields a provider adds are not part of it, so
// every adapter, and the sweep applying a payment it found, take the same
// fingerprint of the same business event: the callback that comes after
// the sweep replays, whatever else it carries.
func EventData(ev Event) []byte {
	return canonjson.Append(nil, eventData(ev))
}

func eventData(ev Event) map[string]any {
	m := map[string]any{"order_no": ev.OrderNo, "txn_id": ev.TxnID,
		"amount": json.Number(strconv.FormatInt(ev.Amount, 10)), "currency": ev.Currency}
	if ev.Type.IsRefund() {
		m["refund_no"] = ev.RefundNo
	}
	return m
}

// EventBody is the callback body that carries ev: what DecodeEvent reads.
// A caller with an event from elsewhere (the sweep, from a status query)
// decodes EventBody(ev) to have it checked as a callback would be.
func EventBody(ev Event) []byte {
	return canonjson.Append(nil, map[string]any{"type": string(ev.Type), "data": eventData(ev)})
}
