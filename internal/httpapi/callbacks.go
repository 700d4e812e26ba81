package httpapi

import (
	"github.com/gin-gonic/gin"
)

// POST /v1/callbacks/{provider}. Size and type were checked by readBody;
// everything else — signature (401), event (400), the idempotency engine
// with the derived key — is the callbacks use case, shared with the NATS
// intake. This handler only reads, calls and maps the answer to HTTP.
func (s *server) callback(c *gin.Context) {
	out, err := s.callbacks.Apply(c.Request.Context(), c.Param("provider"), c.Request.Header, bodyOf(c))
	if out.Unhandled {
		// Acknowledged, not stored and nothing written.
		writeResponse(c, out.Result.Response, false)
		return
	}
	RespondIdempotent(c, s.metrics, s.log, c.FullPath(), out.Result, err)
}
