package providers_test

import (
	"errors"
	"testing"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
)

// TestStatusError: 4xx other than 409 and 429 is permanent; 409, 429 and
// 5xx are retryable; a transport failure is retryable.
func TestStatusError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		permanent bool
	}{
		{400, true}, {401, true}, {403, true}, {404, true}, {422, true},
		{409, false}, {429, false}, {500, false}, {502, false}, {503, false}, {504, false},
	} {
		err := providers.StatusError(tc.status, "x")
		if providers.IsPermanent(err) != tc.permanent || errors.Is(err, providers.ErrRetryable) == tc.permanent {
			t.Errorf("%d: %v, want permanent %t", tc.status, err, tc.permanent)
		}
	}
	if err := providers.Retryable(errors.New("timeout")); providers.IsPermanent(err) || !errors.Is(err, providers.ErrRetryable) {
		t.Errorf("transport: %v", err)
	}
}

// TestRegistry: a provider is unknown until configured; every outbound
// provider is listed, sorted.
func TestRegistry(t *testing.T) {
	t.Parallel()
	var nilReg *providers.Registry
	if _, ok := nilReg.Inbound("x"); ok {
		t.Error("nil registry knows a provider")
	}
	r := providers.NewRegistry(nil, map[string]providers.Outbound{"b": nil, "a": nil})
	if got := r.OutboundProviders(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("outbound providers %v", got)
	}
	if _, ok := r.Inbound("a"); ok {
		t.Error("inbound adapter out of nowhere")
	}
}

// TestEventData: the bytes equal the canonical data of the Standard
// Webhooks body that carries the same event, so the sweep's application
// and the late callback share a fingerprint.
func TestEventData(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"payment.succeeded","data":{"txn_id":"t1","currency":"EUR","order_no":"ord_1","amount":1999}}`)
	ev, data, err := payments.DecodeEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	if got := providers.EventData(ev); string(got) != string(data) {
		t.Errorf("EventData %s, webhook data %s", got, data)
	}
	rbody := []byte(`{"type":"refund.failed","data":{"txn_id":"r1","currency":"EUR","order_no":"ord_1","amount":5,"refund_no":"rfd_1"}}`)
	ev, data, err = payments.DecodeEvent(rbody)
	if err != nil {
		t.Fatal(err)
	}
	if got := providers.EventData(ev); string(got) != string(data) {
		t.Errorf("EventData %s, webhook data %s", got, data)
	}
}
