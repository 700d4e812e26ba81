package app_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// merchantKey is the API key the tests here give the merchant acme.
const merchantKey = "key-acme-0123456789"

// post sends one JSON request to srv, as acme with Idempotency-Key key when
// key is given, with h's headers added (h may be nil). A transport error
// fails the test with t.Error, as post may run on a goroutine of its own,
// and answers status 0.
func post(t testing.TB, srv *httptest.Server, path, key, body string, h http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+merchantKey)
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
