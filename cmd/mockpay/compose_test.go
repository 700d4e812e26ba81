package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/db/dbtest"
	"github.com/paysvc/paysvc/internal/reconcile"
)

// composeFile is the part of docker-compose.yml this test reads.
type composeFile struct {
	Services map[string]struct {
		Command     []string          `yaml:"command"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, name := range []string{"mysql", "paysvc", "mockpay"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no %s service", name)
		}
	}
	return f
}

// TestComposeEnvironmentIsTheContract: every PAYSVC_* value the compose
// file passes is a variable paysvc reads (a bad value for it is refused
// with its name) and the whole set loads.
func TestComposeEnvironmentIsTheContract(t *testing.T) {
	t.Parallel()
	env := readCompose(t).Services["paysvc"].Environment
	if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
		t.Fatalf("compose paysvc environment does not load: %v", err)
	}
	for name := range env {
		if !strings.HasPrefix(name, "PAYSVC_") {
			t.Errorf("compose passes %s, which is not a paysvc variable", name)
			continue
		}
		bad := map[string]string{name: "\x01not-valid"}
		_, err := config.Load(func(k string) string { return bad[k] })
		if err == nil || !strings.HasPrefix(err.Error(), name) {
			t.Errorf("%s: paysvc does not read it (a bad value gave %v)", name, err)
		}
	}
}

// TestComposeDemoRuns wires the two halves of the compose file together
// for real: paysvc with the compose environment (its database swapped for a
// test one, since the host "mysql" exists only inside compose), and mockpay
// with its compose command and environment pointed at it. The scenario must
// finish and the books must be clean.
func TestComposeDemoRuns(t *testing.T) {
	t.Parallel()
	f := readCompose(t)
	d := dbtest.New(t)
	paysvcEnv := f.Services["paysvc"].Environment
	cfg, err := config.Load(func(k string) string {
		if k == "PAYSVC_DSN" {
			return d.DSN
		}
		return paysvcEnv[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := app.Open(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := httptest.NewServer(a.Handler)
	defer srv.Close()

	mp := f.Services["mockpay"]
	if len(mp.Entrypoint) != 1 || !strings.HasSuffix(mp.Entrypoint[0], "/mockpay") {
		t.Fatalf("mockpay entrypoint %v", mp.Entrypoint)
	}
	mockEnv := func(k string) string {
		if k == "MOCKPAY_URL" {
			return srv.URL
		}
		return mp.Environment[k]
	}
	var out strings.Builder
	if err := run(ctx, mp.Command, mockEnv, &out, io.Discard); err != nil {
		t.Fatalf("mockpay %v: %v\n%s", mp.Command, err, out.String())
	}
	rep, err := reconcile.Run(ctx, a.DB)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean() {
		t.Fatalf("books not clean after the compose scenario: %v", rep.Findings)
	}
	t.Logf("compose scenario: %d orders, %d payments, %d refunds, %d ledger entries", rep.Orders, rep.Payments, rep.Refunds, rep.LedgerEntries)
}
