package httpapi

import (
	"context"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/validate"
)

func orderResponse(status int, o orders.Order, location string) idempotency.Response {
	return idempotency.Response{Status: status, ContentType: contentTypeJSON, Location: location, Body: documents.Order(o)}
}

// Limits of the order fields (README.md, "Orders and refunds").
const (
	MaxMerchantOrderNo = 64
	MaxDescription     = 255
)

func decodeCreate(obj map[string]any) (orders.CreateInput, error) {
	f := validate.New(obj, "")
	f.Only("merchant_order_no", "amount", "currency", "description")
	in := orders.CreateInput{
		MerchantOrderNo: f.Text("merchant_order_no", true, MaxMerchantOrderNo),
		Amount:          f.Amount("amount"),
		Currency:        f.Currency("currency"),
		Description:     f.FreeText("description", MaxDescription),
	}
	return in, f.Err()
}

// businessResponse turns a business outcome into the response to store:
// a known business error becomes its problem (stored and replayed like a
// success: README.md, "Idempotency in short"); anything else stays an error,
// rolls back and frees the key.
func businessResponse(resp idempotency.Response, err error) (idempotency.Response, error) {
	if err == nil {
		return resp, nil
	}
	if k := problems.Of(err); k.Status < 500 {
		return problemResponse(err), nil
	}
	return idempotency.Response{}, err
}

// POST /v1/orders. Statements on the first request: claim INSERT, BEGIN,
// order INSERT, fence UPDATE, COMMIT = 5 round trips; on a replay: claim
// INSERT (1062) and the record SELECT = 2.
func (s *server) createOrder(c *gin.Context) {
	merchant := merchantOf(c)
	var in orders.CreateInput
	req, ok := s.merchantRequest(c, false, func(obj map[string]any) (err error) {
		in, err = decodeCreate(obj)
		return err
	})
	if !ok {
		return
	}
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		o, err := s.orders.Create(ctx, tx, merchant, in)
		return businessResponse(orderResponse(201, o, "/v1/orders/"+o.OrderNo), err)
	})
}

// noFields decodes a body that must be empty or {}.
func noFields(obj map[string]any) error { return validate.New(obj, "").Only() }

// POST /v1/orders/{order_no}/cancel. First request: claim, BEGIN,
// conditional UPDATE, SELECT, fence, COMMIT = 6 round trips.
func (s *server) cancelOrder(c *gin.Context) {
	merchant := merchantOf(c)
	req, ok := s.merchantRequest(c, true, noFields)
	if !ok {
		return
	}
	orderNo := c.Param("order_no")
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		o, err := s.orders.Cancel(ctx, tx, merchant, orderNo)
		return businessResponse(orderResponse(200, o, ""), err)
	})
}

// GET /v1/orders/{order_no}: one SELECT, no idempotency.
func (s *server) getOrder(c *gin.Context) {
	o, err := orders.Get(c.Request.Context(), s.db, merchantOf(c), c.Param("order_no"))
	if err != nil {
		s.fail(c, err)
		return
	}
	writeResponse(c, orderResponse(200, o, ""), false)
}
