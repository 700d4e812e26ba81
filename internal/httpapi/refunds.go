package httpapi

import (
	"context"

	"github.com/gin-gonic/gin"
	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/validate"
)

// Limits of the refund fields (README.md, "Orders and refunds").
const (
	MaxRefundReason     = 255
	MaxMerchantRefundNo = 64
)

// POST /v1/orders/{order_no}/refunds. First request: claim, BEGIN, order
// locking read, refund INSERT, guarded order UPDATE, fence, COMMIT = 7
// round trips.
func (s *server) createRefund(c *gin.Context) {
	merchant := merchantOf(c)
	var in payments.RefundInput
	req, ok := s.merchantRequest(c, false, func(obj map[string]any) error {
		f := validate.New(obj, "")
		f.Only("amount", "merchant_refund_no", "reason")
		in = payments.RefundInput{
			Amount:           f.Amount("amount"),
			MerchantRefundNo: f.Text("merchant_refund_no", true, MaxMerchantRefundNo),
			Reason:           f.Text("reason", false, MaxRefundReason),
		}
		return f.Err()
	})
	if !ok {
		return
	}
	orderNo := c.Param("order_no")
	s.idempotent(c, req, func(ctx context.Context, tx *gorm.DB) (idempotency.Response, error) {
		r, err := s.payments.CreateRefund(ctx, tx, merchant, orderNo, in)
		return businessResponse(idempotency.Response{
			Status:      201,
			ContentType: contentTypeJSON,
			Body:        documents.Refund(r),
		}, err)
	})
}
