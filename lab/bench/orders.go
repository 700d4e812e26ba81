package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
)

// Section (c): POST /v1/orders, a third of the requests repeating an earlier
// one (same Idempotency-Key, same body), against its raw-SQL equivalent.

// orderRequest is one create request.
type orderRequest struct {
	key             string
	merchantOrderNo string
	body            []byte
}

func newOrderRequest(m *mix[orderRequest]) orderRequest {
	mon := nextMerchantOrderNo("b")
	return orderRequest{key: uuidV4(m.r), merchantOrderNo: mon, body: orderRequestBody(mon)}
}

// rawOrderOp issues a create in the committed-claim design (section j):
// claim; BEGIN, order INSERT, fence, COMMIT
// (5 round trips); a repeat: claim → 1062, SELECT.
func rawOrderOp(raw *sql.DB, codec *idempotency.Codec) opFunc {
	m := newMix[orderRequest]()
	return func(ctx context.Context) (opKind, error) {
		if rq, ok := m.next(); ok {
			return kindReplay, rawReplay(ctx, raw, codec, merchantScope, rq.key, fingerprint(rq.body), orderTTL)
		}
		rq := newOrderRequest(m)
		if err := rawOrderFirst(ctx, raw, codec, rq); err != nil {
			return kindFirst, err
		}
		m.succeeded(rq)
		return kindFirst, nil
	}
}

func rawOrderFirst(ctx context.Context, raw *sql.DB, codec *idempotency.Codec, rq orderRequest) error {
	now := time.Now().UTC()
	id := idempotency.KeyHash(merchantScope, rq.key)
	if _, err := raw.ExecContext(ctx, sqlClaim, id, fingerprint(rq.body), statusProcessing, now.Add(orderTTL)); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return inTx(ctx, raw, func(tx *sql.Tx) error {
		fence, err := orderStatements(ctx, tx, codec, rq, id)
		if err != nil {
			return err
		}
		return execOne(ctx, tx, "fence", sqlFence, fence...)
	})
}

// orderStatements is a create's business statement, between the claim and
// the fence (the order INSERT), and returns the fence's arguments.
func orderStatements(ctx context.Context, q sqlRunner, codec *idempotency.Codec, rq orderRequest, id []byte) (fence []any, err error) {
	at := time.Now().UTC().Truncate(time.Microsecond)
	o := orders.Order{
		OrderNo: orders.NewOrderNo(), MerchantID: merchantID, MerchantOrderNo: rq.merchantOrderNo,
		Status: orders.Created, Amount: amount, Currency: currency, Version: 1, CreatedAt: at, UpdatedAt: at,
	}
	if _, err := q.ExecContext(ctx, sqlInsertOrder, o.OrderNo, o.MerchantID, []byte(o.MerchantOrderNo),
		string(o.Status), o.Amount, o.Currency, o.RefundedAmount, o.PendingRefundAmount, o.Description,
		o.Version, o.CreatedAt, o.UpdatedAt, nil, at.Add(2*time.Hour)); err != nil { // PAYSVC_ORDER_TTL's default
		return nil, fmt.Errorf("order: %w", err)
	}
	format, blob, err := codec.Encode(idempotency.Response{Status: 201, ContentType: "application/json",
		Location: "/v1/orders/" + o.OrderNo, Body: orderResponse(o)})
	if err != nil {
		return nil, err
	}
	return []any{statusCompleted, 201, format, blob, id, statusProcessing}, nil
}

// serviceOrderOp posts creates; a repeat must come back as a replayed 201.
func serviceOrderOp(s *service) opFunc { return serviceOrderOpAs(s, apiKey) }

// serviceOrderOpAs is serviceOrderOp with bearer as the API key.
func serviceOrderOpAs(s *service, bearer string) opFunc {
	m := newMix[orderRequest]()
	return func(ctx context.Context) (opKind, error) {
		rq, dup := m.next()
		kind := kindReplay
		if !dup {
			rq, kind = newOrderRequest(m), kindFirst
		}
		rep, err := s.post(ctx, "/v1/orders", orderHeaderAs(bearer, rq.key), rq.body)
		if err != nil {
			return kind, err
		}
		if err := rep.expect(http.StatusCreated, dup); err != nil {
			return kind, fmt.Errorf("create %s: %w", rq.key, err)
		}
		if !dup {
			m.succeeded(rq)
		}
		return kind, nil
	}
}
