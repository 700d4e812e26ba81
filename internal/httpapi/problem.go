package httpapi

import (
	"github.com/paysvc/paysvc/internal/documents"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/problems"
)

// problemResponse renders err as a storable response.
func problemResponse(err error) idempotency.Response {
	p := problems.For(err)
	return idempotency.Response{Status: p.Status, ContentType: contentTypeProblem, Body: documents.Marshal(p)}
}

const (
	contentTypeJSON    = "application/json"
	contentTypeProblem = "application/problem+json"
)
