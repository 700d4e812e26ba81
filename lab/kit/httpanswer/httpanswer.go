// Package httpanswer reduces the service's HTTP answers to what the
// process suites compare, so that each suite reads them one way.
package httpanswer

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/client"
)

// Answer is one HTTP response, reduced to what the tests compare.
type Answer struct {
	Status     int
	Body       []byte
	Replayed   bool   // Idempotent-Replayed: true
	Location   string // Location header
	RetryAfter string // Retry-After header, verbatim
	Code       string // problem code, "" unless application/problem+json
	Took       time.Duration
	Instance   int // which serve process answered, where a suite runs several
}

func (a Answer) String() string {
	if a.Instance > 0 {
		return fmt.Sprintf("%d (serve-%d, %v) replayed=%t code=%q body=%.200s", a.Status, a.Instance, a.Took.Round(time.Millisecond), a.Replayed, a.Code, a.Body)
	}
	return fmt.Sprintf("%d replayed=%t code=%q body=%s", a.Status, a.Replayed, a.Code, a.Body)
}

// InUse reports the in-flight answer (409 idempotency_key_in_use), the one
// a client must retry later; a 409 order_exists is final.
func (a Answer) InUse() bool {
	return a.Status == http.StatusConflict && a.Code == client.CodeIdempotencyKeyInUse
}

// Retry reports an answer a well-behaved client retries: 409 in flight and
// 503 unavailable (README.md, "Idempotency in short" and "Overload and
// failure").
func (a Answer) Retry() bool { return a.InUse() || a.Status == http.StatusServiceUnavailable }

// First reports a 201 produced by this request's own execution.
func (a Answer) First() bool { return a.Status == http.StatusCreated && !a.Replayed }

// Field is a top-level string field of a JSON body ("" if none).
func (a Answer) Field(name string) string {
	var m map[string]any
	_ = json.Unmarshal(a.Body, &m)
	s, _ := m[name].(string)
	return s
}

// OrderNo is the order_no of an order's body ("" otherwise).
func (a Answer) OrderNo() string { return a.Field("order_no") }

// Order is the order of a 201 body (zero otherwise).
func (a Answer) Order() (o client.Order) {
	_ = json.Unmarshal(a.Body, &o)
	return o
}

// Of is a merchant client attempt's answer.
func Of(a client.Attempt) Answer {
	return Answer{Status: a.StatusCode, Body: a.Body, Replayed: a.Replayed(), Location: a.Header.Get("Location"),
		RetryAfter: a.Header.Get("Retry-After"), Code: a.Code(), Took: a.Took}
}

// Do sends req with hc and reads its whole answer.
func Do(hc *http.Client, req *http.Request) (Answer, error) {
	began := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{
		Status:     resp.StatusCode,
		Body:       b,
		Replayed:   resp.Header.Get("Idempotent-Replayed") == "true",
		Location:   resp.Header.Get("Location"),
		RetryAfter: resp.Header.Get("Retry-After"),
		Took:       time.Since(began),
	}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return Answer{}, fmt.Errorf("problem body %q: %w", b, err)
		}
		a.Code = p.Code
	}
	return a, nil
}
