package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/validate"
)

// tokenJSON is the wire form of an issued token.
type tokenJSON struct {
	Token     string `json:"token"`
	ExpiresAt string `json:"expires_at"`
}

// POST /v1/idempotency-tokens (README.md, "Tokens and the Redis pre-check"):
// body empty or {}, no Idempotency-Key (one sent is ignored: a duplicate
// issue only mints a token nobody uses, which purge removes). One INSERT.
func (s *server) issueToken(c *gin.Context) {
	obj, _, err := parseObject(bodyOf(c), true)
	if err == nil {
		err = validate.New(obj, "").Only()
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	tok, err := s.engine.IssueToken(c.Request.Context(), idempotency.MerchantScope(merchantOf(c)), s.ttl)
	if err != nil {
		s.fail(c, err)
		return
	}
	writeResponse(c, idempotency.Response{
		Status:      http.StatusCreated,
		ContentType: contentTypeJSON,
		Body:        documents.Marshal(tokenJSON{Token: tok.Value, ExpiresAt: documents.FormatTime(tok.ExpiresAt)}),
	}, false)
}

// TokenRoute issues tokens.
const TokenRoute = "/v1/idempotency-tokens"
