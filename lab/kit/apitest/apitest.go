// Package apitest holds HTTP traffic to api/openapi.yaml: a test that sends
// its requests through Validator.Transport (or calls Validator.Check) fails
// when the service answers with a status, header or body field the document
// does not describe, so the contract cannot drift from the code unnoticed.
//
//	v := apitest.NewValidator(t)
//	client := &http.Client{Transport: v.Transport(t, nil)}
//	resp, err := client.Post(srv.URL+"/v1/orders", "application/json", body)
//
// What is checked, for every exchange:
//
//   - the response: status documented for the operation, every documented
//     required header present and valid, no undocumented header (beyond
//     HTTP framing headers such as Content-Length), a body matching the
//     documented schema for its Content-Type (response objects are closed
//     with additionalProperties: false, so an extra field fails);
//   - a request the router does not know: the answer must be the documented
//     404 not_found or 405 method_not_allowed problem;
//   - a request the document refuses (bad body, missing header...): the
//     answer must not be a success. Tests send invalid requests on purpose,
//     so an invalid request alone is not a failure; it being accepted is;
//   - the x-idempotency in-flight rule: a problem with the in-flight code
//     must carry Retry-After when the document says so.
//
// Failures are reported with t.Errorf, never t.Fatal, so Transport may be
// used from any goroutine of a test.
package apitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/textproto"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/paysvc/paysvc/api"
)

// frameHeaders may appear on any response without being documented: they
// describe the HTTP message, not the API.
var frameHeaders = map[string]bool{
	"Content-Type":      true,
	"Content-Length":    true,
	"Content-Encoding":  true,
	"Transfer-Encoding": true,
	"Date":              true,
	"Connection":        true,
	"Keep-Alive":        true,
	"Vary":              true,
}

// Component responses that describe the router's own answers to requests
// outside the document. No operation refers to them (no operation answers
// a path or method the document lacks); the Validator does, by these names.
const (
	RouteNotFoundResponse    = "RouteNotFound"
	MethodNotAllowedResponse = "MethodNotAllowed"
)

// maxErrLen bounds one reported error: schema errors quote whole schemas.
const maxErrLen = 2000

// Validator checks HTTP exchanges against api/openapi.yaml. It is safe for
// concurrent use.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	opts   *openapi3filter.Options

	inFlightCode       string
	inFlightRetryAfter bool

	// kin-openapi documents are not documented as safe for concurrent
	// validation; requests of one test often run concurrently.
	mu sync.Mutex
	// checked remembers the verdict on each distinct exchange, keyed by a
	// digest of everything the verdict depends on. The storms send the same
	// exchange hundreds of times (replays, 409s), and one validation takes
	// milliseconds, far more under the race detector: behind mu, 3,200
	// concurrent clients queued here for tens of seconds before they could
	// send their next request (docs/BENCHMARKS.md, "Overload").
	checked sync.Map // [32]byte -> []error
}

// NewValidator parses and validates api.Spec and builds a Validator; it
// stops the test if the document is unusable.
func NewValidator(t testing.TB) *Validator {
	t.Helper()
	v, err := newValidator(api.Spec)
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return v
}

// Load is NewValidator for code that has no testing.TB yet, such as a
// TestMain wrapping a package's shared HTTP client.
func Load() (*Validator, error) { return newValidator(api.Spec) }

func newValidator(spec []byte) (*Validator, error) {
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("api/openapi.yaml is not valid: %w", err)
	}
	// The servers list names the default address; tests listen elsewhere.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route api/openapi.yaml: %w", err)
	}
	v := &Validator{
		doc:    doc,
		router: router,
		opts: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			// Authentication is the service's job and tests probe it; the
			// document only has to describe the 401.
			AuthenticationFunc: func(context.Context, *openapi3filter.AuthenticationInput) error { return nil },
		},
	}
	if x, ok := doc.Extensions["x-idempotency"].(map[string]any); ok {
		if f, ok := x["in-flight"].(map[string]any); ok {
			v.inFlightCode, _ = f["code"].(string)
			v.inFlightRetryAfter, _ = f["retry-after"].(bool)
		}
	}
	return v, nil
}

// Check fails t (with Errorf) for every way the exchange departs from the
// document. req is the request as sent (its body is not read: reqBody is
// it), resp the response (its body is not read: respBody is it).
func (v *Validator) Check(t testing.TB, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	t.Helper()
	for _, err := range v.Validate(req, reqBody, resp, respBody) {
		t.Errorf("apitest: %s %s -> %d: %v\nresponse body: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, excerpt(respBody, 500))
	}
}

// Validate returns every way the exchange departs from the document; Check
// reports them. It does not read or modify req.Body or resp.Body.
func (v *Validator) Validate(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) []error {
	if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
		// net/http's own answer to a header block over its limit, sent
		// before any handler runs: not paysvc's to document.
		return nil
	}
	digest := exchangeDigest(req, reqBody, resp, respBody)
	if errs, ok := v.checked.Load(digest); ok {
		return errs.([]error)
	}
	errs := v.validate(req, reqBody, resp, respBody)
	v.checked.Store(digest, errs)
	return errs
}

// exchangeDigest is SHA-256 over the request's method, URL, headers and
// body and the response's status, headers and body: every input of a
// verdict. Of the headers that differ on every exchange of the same content
// (Date, X-Request-Id) only the presence counts: their values are not
// validated.
func exchangeDigest(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) [32]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	headers := func(hdr http.Header) {
		for _, name := range slices.Sorted(maps.Keys(hdr)) {
			field([]byte(name))
			if name == "Date" || name == "X-Request-Id" {
				continue // present, whatever its value
			}
			for _, v := range hdr[name] {
				field([]byte(v))
			}
		}
		field(nil)
	}
	field([]byte(req.Method))
	field([]byte(req.URL.RequestURI()))
	headers(req.Header)
	field(reqBody)
	field([]byte(strconv.Itoa(resp.StatusCode)))
	headers(resp.Header)
	field(respBody)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

func (v *Validator) validate(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	ctx := context.Background()

	// A copy whose body is reqBody: kin-openapi reads it, and would read
	// the original through GetBody.
	r := req.Clone(ctx)
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	r.ContentLength = int64(len(reqBody))

	var errs []error
	route, params, err := v.router.FindRoute(r)
	switch {
	case errors.Is(err, routers.ErrPathNotFound):
		route = v.routerRoute(r, http.StatusNotFound, RouteNotFoundResponse)
	case errors.Is(err, routers.ErrMethodNotAllowed):
		route = v.routerRoute(r, http.StatusMethodNotAllowed, MethodNotAllowedResponse)
	case err != nil:
		return []error{fmt.Errorf("find route: %w", err)}
	}
	if route == nil {
		return []error{fmt.Errorf("the document lacks components/responses %s or %s", RouteNotFoundResponse, MethodNotAllowedResponse)}
	}

	reqInput := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: v.opts}
	if route.Operation.OperationID != "" { // a documented operation
		if reqErr := openapi3filter.ValidateRequest(ctx, reqInput); reqErr != nil && resp.StatusCode < 300 {
			errs = append(errs, fmt.Errorf("the document refuses this request, but the service accepted it: %s", short(reqErr)))
		}
	}

	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                v.opts,
	}
	if err := openapi3filter.ValidateResponse(ctx, respInput); err != nil {
		errs = append(errs, fmt.Errorf("response: %s", short(err)))
	}
	errs = append(errs, v.checkHeaders(route, resp)...)
	errs = append(errs, v.checkInFlight(resp, respBody)...)
	return errs
}

// OperationID is the operationId of the document's operation that req
// calls, "" for a request outside the document.
func (v *Validator) OperationID(req *http.Request) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	route, _, err := v.router.FindRoute(req)
	if err != nil {
		return ""
	}
	return route.Operation.OperationID
}

// OperationIDs are the operationIds of every operation of the document.
func (v *Validator) OperationIDs() []string {
	var ids []string
	for _, item := range v.doc.Paths.Map() {
		for _, op := range item.Operations() {
			ids = append(ids, op.OperationID)
		}
	}
	slices.Sort(ids)
	return ids
}

// routerRoute stands for a request outside the document: only the given
// component response is a correct answer.
func (v *Validator) routerRoute(r *http.Request, status int, component string) *routers.Route {
	ref := v.doc.Components.Responses[component]
	if ref == nil {
		return nil
	}
	op := openapi3.NewOperation()
	op.Responses = openapi3.NewResponses(openapi3.WithStatus(status, ref))
	return &routers.Route{Spec: v.doc, Path: r.URL.Path, Method: r.Method, Operation: op}
}

// checkHeaders refuses headers the matching response does not document.
func (v *Validator) checkHeaders(route *routers.Route, resp *http.Response) []error {
	ref := route.Operation.Responses.Status(resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return nil // an undocumented status is reported by ValidateResponse
	}
	documented := map[string]bool{}
	for name := range ref.Value.Headers {
		documented[textproto.CanonicalMIMEHeaderKey(name)] = true
	}
	var errs []error
	for name := range resp.Header {
		name = textproto.CanonicalMIMEHeaderKey(name)
		if !frameHeaders[name] && !documented[name] {
			errs = append(errs, fmt.Errorf("undocumented response header %q", name))
		}
	}
	return errs
}

// checkInFlight applies x-idempotency in-flight.retry-after.
func (v *Validator) checkInFlight(resp *http.Response, body []byte) []error {
	if v.inFlightCode == "" || !v.inFlightRetryAfter {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return nil
	}
	var p struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(body, &p) != nil || p.Code != v.inFlightCode {
		return nil
	}
	ra := resp.Header.Get("Retry-After")
	if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		return []error{fmt.Errorf("%s needs Retry-After in whole seconds (x-idempotency in-flight), got %q", p.Code, ra)}
	}
	return nil
}

// Transport returns a RoundTripper that sends requests through base
// (http.DefaultTransport when nil) and checks every exchange, failing t
// (with Errorf) for every departure from the document. Bodies are
// buffered: the caller reads the response as usual.
func (v *Validator) Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	return v.Reporting(base, func(req *http.Request, resp *http.Response, respBody []byte, err error) {
		t.Errorf("apitest: %s %s -> %d: %v\nresponse body: %s",
			req.Method, req.URL.Path, resp.StatusCode, err, excerpt(respBody, 500))
	})
}

// Reporting is Transport for callers without a testing.TB at hand, such as
// a TestMain that wraps a package's shared client and collects departures
// across all its tests: each one is handed to report.
func (v *Validator) Reporting(base http.RoundTripper, report func(req *http.Request, resp *http.Response, respBody []byte, err error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, report: report, base: base}
}

// ReportingAsync is Reporting with the checks run in the background, off
// the client's path: a client gets its response at once, and wait returns
// when every exchange sent so far has been checked and reported. For
// packages that report at the end of the run (a TestMain): the storms'
// clients would otherwise wait for each other's checks, which take
// milliseconds each, far more under the race detector, between every
// request and their next retry.
func (v *Validator) ReportingAsync(base http.RoundTripper, report func(req *http.Request, resp *http.Response, respBody []byte, err error)) (rt http.RoundTripper, wait func()) {
	if base == nil {
		base = http.DefaultTransport
	}
	a := &asyncChecks{v: v, report: report, slots: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))}
	return &transport{v: v, report: report, base: base, async: a}, a.wg.Wait
}

// asyncChecks runs the checks of a ReportingAsync transport, at most one
// per CPU at a time.
type asyncChecks struct {
	v      *Validator
	report func(req *http.Request, resp *http.Response, respBody []byte, err error)
	slots  chan struct{}
	wg     sync.WaitGroup
}

func (a *asyncChecks) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	// Copies: the caller goes on with the originals.
	req = req.Clone(context.Background())
	r := *resp
	r.Header = resp.Header.Clone()
	r.Body = http.NoBody
	a.wg.Go(func() {
		a.slots <- struct{}{}
		defer func() { <-a.slots }()
		for _, err := range a.v.Validate(req, reqBody, &r, respBody) {
			a.report(req, &r, respBody, err)
		}
	})
}

// Client is an http.Client whose every exchange is checked.
func (v *Validator) Client(t testing.TB) *http.Client {
	return &http.Client{Transport: v.Transport(t, nil)}
}

type transport struct {
	v      *Validator
	report func(req *http.Request, resp *http.Response, respBody []byte, err error)
	base   http.RoundTripper
	async  *asyncChecks // nil: check before returning the response
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("apitest: read request body: %w", err)
		}
		reqBody = b
	}
	out := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		out.Body = io.NopCloser(bytes.NewReader(reqBody))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	resp, err := tr.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("apitest: read response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if tr.async != nil {
		tr.async.check(req, reqBody, resp, respBody)
		return resp, nil
	}
	for _, err := range tr.v.Validate(req, reqBody, resp, respBody) {
		tr.report(req, resp, respBody, err)
	}
	return resp, nil
}

func short(err error) string { return excerpt([]byte(err.Error()), maxErrLen) }

func excerpt(b []byte, n int) string {
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.TrimSpace(s)
}
