package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// ErrUnknownProvider: no webhook secret is configured for the provider.
var ErrUnknownProvider = errors.New("unknown provider")

// The answer to an event of a type no handler acts on (CONTRACT §5 v2).
var unhandledBody = marshal(struct {
	Result payments.Result `json:"result"`
}{payments.Unhandled})

// unhandledTypeLabel is the metrics type label of unhandled events.
const unhandledTypeLabel = "other"

type callbackJSON struct {
	Result  payments.Result `json:"result"`
	OrderNo string          `json:"order_no"`
}

// POST /v1/callbacks/{provider}. Checks in contract order: size and type
// (readBody), signature (401), event (400), then the idempotency engine
// with the derived key {provider}:{type}:{txn_id} and the fingerprint of
// data. A payment applied on first delivery: claim, BEGIN, payment INSERT,
// order UPDATE, ledger INSERT, order locking read and event INSERT (the
// outbox), fence, COMMIT = 9 round trips; a replay: 2.
func (s *server) callback(c *gin.Context) {
	provider := c.Param("provider")
	verifier, known := s.verifiers[provider]
	if !known {
		s.countCallback("unknown", "", "unknown_provider")
		s.fail(c, ErrUnknownProvider)
		return
	}
	body := bodyOf(c)
	if err := verifier.Verify(c.Request.Header, body); err != nil {
		// Why goes to the log only: "302s behind, tolerance 300s" would
		// tell anyone the server's clock and its tolerance, and which
		// check a forgery got past. The client gets one fixed answer.
		s.log.WarnContext(c.Request.Context(), "callback signature refused", "provider", provider, "err", err.Error())
		s.countCallback(provider, "", "invalid_signature")
		s.fail(c, webhooks.ErrInvalidSignature)
		return
	}
	ev, data, err := payments.DecodeEvent(body)
	if errors.Is(err, payments.ErrUnhandledType) {
		// Acknowledged, not stored and nothing written; counted under one
		// type label, since the type is the provider's to choose.
		s.countCallback(provider, unhandledTypeLabel, string(payments.Unhandled))
		c.Data(http.StatusOK, contentTypeJSON, unhandledBody)
		return
	}
	if err != nil {
		s.countCallback(provider, "", "invalid_request")
		s.fail(c, err)
		return
	}
	req := idempotency.Request{
		Scope:       idempotency.CallbackScope(provider),
		Key:         provider + ":" + string(ev.Type) + ":" + ev.TxnID,
		Fingerprint: idempotency.DataFingerprint(data),
		TTL:         s.callbackTTL,
	}
	var result payments.Result
	res, err := s.engine.Do(c.Request.Context(), req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		var err error
		if result, err = s.payments.HandleCallback(ctx, tx, provider, ev); err != nil {
			return idempotency.Response{}, err
		}
		return idempotency.Response{Status: 200, ContentType: contentTypeJSON,
			Body: marshal(callbackJSON{Result: result, OrderNo: ev.OrderNo})}, nil
	})
	switch {
	case err != nil:
		s.countCallback(provider, string(ev.Type), problemFor(err).Code)
	case res.Replayed():
		// Only a replay needs its stored body read for the label.
		var stored callbackJSON
		_ = json.Unmarshal(res.Response.Body, &stored)
		s.countCallback(provider, string(ev.Type), string(stored.Result))
	default:
		s.countCallback(provider, string(ev.Type), string(result))
	}
	RespondIdempotent(c, s.metrics, s.log, c.FullPath(), res, err)
}

// countCallback labels by configured provider names only: the path segment
// is attacker-chosen and must not mint time series.
func (s *server) countCallback(provider, typ, result string) {
	s.metrics.Callbacks.WithLabelValues(provider, typ, result).Inc()
}
