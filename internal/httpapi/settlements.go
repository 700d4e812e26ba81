package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/internal/validate"
)

// GET /v1/settlements?date=YYYY-MM-DD: the calling merchant's settlements
// of a UTC day, one per currency, as `paysvc settle` wrote them; an empty
// list for a day not settled (yet) or without activity.
func (s *server) listSettlements(c *gin.Context) {
	q, err := queryOf(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	dates := q["date"]
	if len(dates) > 1 {
		s.fail(c, validate.Invalid("date", "must be given once"))
		return
	}
	raw := ""
	if len(dates) == 1 {
		raw = dates[0]
	}
	day, err := settlement.ParseDate("date", raw)
	if err != nil {
		s.fail(c, err)
		return
	}
	rows, err := settlement.List(c.Request.Context(), s.db, merchantOf(c), day)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Data(http.StatusOK, contentTypeJSON, documents.Marshal(struct {
		Data []settlement.Settlement `json:"data"`
	}{rows}))
}
