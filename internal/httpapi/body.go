package httpapi

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/paysvc/paysvc/internal/canonjson"
	"github.com/paysvc/paysvc/internal/problems"
	"github.com/paysvc/paysvc/internal/validate"
)

// MaxBody is the largest request body accepted (65,536 bytes is allowed).
const MaxBody = 64 << 10

const bodyKey = "paysvc.body"

// readBody is the first check of every route with a body: 413 size, then
// 415 type. It keeps the body for the later steps (signature, fingerprint).
func readBody(c *gin.Context) {
	if c.Request.ContentLength > MaxBody {
		abortProblem(c, fmt.Errorf("%w: Content-Length %d", problems.ErrBodyTooLarge, c.Request.ContentLength))
		return
	}
	b, err := io.ReadAll(io.LimitReader(c.Request.Body, MaxBody+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			abortProblem(c, problems.ErrBodyTooLarge)
			return
		}
		abortProblem(c, validate.Invalid("", "body could not be read"))
		return
	}
	if len(b) > MaxBody {
		abortProblem(c, problems.ErrBodyTooLarge)
		return
	}
	if len(b) > 0 {
		mt, _, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
		if err != nil || mt != "application/json" {
			abortProblem(c, fmt.Errorf("%w, got %s", problems.ErrUnsupportedMediaType, validate.Quote(c.GetHeader("Content-Type"))))
			return
		}
	}
	c.Set(bodyKey, b)
	c.Next()
}

func bodyOf(c *gin.Context) []byte {
	b, _ := c.Get(bodyKey)
	body, _ := b.([]byte)
	return body
}

// parseObject parses a JSON object body and returns it with its canonical
// form (the fingerprint input). An empty body is an empty object when
// emptyOK, as for cancel, which takes no fields; its canonical form is then
// nil, so "" and "{}" are the same request.
func parseObject(body []byte, emptyOK bool) (map[string]any, []byte, error) {
	if len(body) == 0 {
		if emptyOK {
			return map[string]any{}, nil, nil
		}
		return nil, nil, validate.Invalid("", "request body is required")
	}
	tree, err := canonjson.Parse(body)
	if err != nil {
		return nil, nil, validate.Invalid("", err.Error())
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, nil, validate.Invalid("", "request body must be a JSON object")
	}
	if len(obj) == 0 && emptyOK {
		return obj, nil, nil
	}
	return obj, canonjson.Append(nil, obj), nil
}
