package settlement_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/settlement"
	"github.com/paysvc/paysvc/lab/kit/apitest"
	"github.com/paysvc/paysvc/lab/kit/apptest"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestSettlementsAPI: GET /v1/settlements answers the calling merchant's
// rows only, validates date, and every exchange matches api/openapi.yaml.
func TestSettlementsAPI(t *testing.T) {
	t.Parallel()
	d := dbtest.New(t)
	f := newFixture(t, d, 300, 5)
	cfg := config.Defaults()
	cfg.DSN = d.DSN
	keys := map[string]string{"acme": "key-acme-0123456789", "beta": "key-beta-0123456789", "nobody": "key-none-0123456789"}
	cfg.APIKeys = map[string]string{}
	for m, k := range keys {
		cfg.APIKeys[k] = m
	}
	_, srv := apptest.Start(t, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Options{})
	client := apitest.NewValidator(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := settlement.Run(ctx, d.Gorm, ledgerDay, settlement.Options{}); err != nil {
		t.Fatal(err)
	}
	date := ledgerDay.Format(settlement.DateLayout)
	get := func(apiKey, query string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/settlements"+query, nil)
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, m := range []string{"acme", "beta", "nobody"} {
		status, body := get(keys[m], "?date="+date)
		var got struct {
			Data []settlement.Settlement `json:"data"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &got) != nil {
			t.Fatalf("%s: %d %s", m, status, body)
		}
		var want []settlement.Settlement
		for _, s := range f.wantRows(ledgerDay) {
			if s.MerchantID == m {
				want = append(want, s)
			}
		}
		if !slices.Equal(got.Data, want) && !(len(got.Data) == 0 && len(want) == 0) {
			t.Errorf("%s sees %v, want %v", m, got.Data, want)
		}
	}
	cases := []struct {
		name, key, query string
		status           int
	}{
		{"a day not settled", "key-acme-0123456789", "?date=2026-12-25", http.StatusOK},
		{"no date", "key-acme-0123456789", "", http.StatusBadRequest},
		{"empty date", "key-acme-0123456789", "?date=", http.StatusBadRequest},
		{"not a day", "key-acme-0123456789", "?date=2026-02-30", http.StatusBadRequest},
		{"a timestamp", "key-acme-0123456789", "?date=2026-11-30T00:00:00Z", http.StatusBadRequest},
		{"twice", "key-acme-0123456789", "?date=" + date + "&date=" + date, http.StatusBadRequest},
		{"no API key", "", "?date=" + date, http.StatusUnauthorized},
		{"unknown API key", "key-zzzz-0123456789", "?date=" + date, http.StatusUnauthorized},
	}
	for _, c := range cases {
		if status, body := get(c.key, c.query); status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, status, body, c.status)
		} else if status == http.StatusOK && string(body) != `{"data":[]}` {
			t.Errorf("%s: %s, want an empty list", c.name, body)
		}
	}
}
