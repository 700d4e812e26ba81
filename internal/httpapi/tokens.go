package httpapi

import (
	"fmt"
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

// tokenBeforeBody answers a token that is not valid for this merchant
// before bodyErr, the body's refusal: the key check comes first
// (api/openapi.yaml, "Errors"). It costs one SELECT, and only on this error
// path; a valid body leaves the token's check to the engine's claim, at no
// extra cost.
func (s *server) tokenBeforeBody(c *gin.Context, bodyErr error) error {
	key, err := idempotency.KeyFromHeader(c.Request.Header.Values(idempotency.KeyHeader))
	if err != nil || !idempotency.IsToken(key) || c.Request.Method != http.MethodPost || merchantOf(c) == "" || c.FullPath() == TokenRoute {
		return bodyErr
	}
	ok, err := s.engine.TokenValid(c.Request.Context(), idempotency.MerchantScope(merchantOf(c)), key)
	switch {
	case err != nil:
		return err
	case !ok:
		s.metrics.IdempotencyRequests.WithLabelValues(c.FullPath(), "invalid_key").Inc()
		return fmt.Errorf("key %q: %w", key, idempotency.ErrTokenInvalid)
	}
	return bodyErr
}

// TokenRoute issues tokens.
const TokenRoute = "/v1/idempotency-tokens"
