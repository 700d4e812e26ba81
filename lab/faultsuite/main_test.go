package faultsuite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/events"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// paysvcBin is the binary TestMain built.
var paysvcBin string

func TestMain(m *testing.M) { testproc.Main(m, "faultsuite", []string{"./cmd/paysvc"}, &paysvcBin) }

// Settings every serve process gets.
const (
	apiKey   = "key-acme-0123456789"
	merchant = "acme"
)

// startServe starts `paysvc serve` on dsn's database with env added to
// (and overriding) the suite's settings: see testproc.StartServe.
func startServe(t *testing.T, name, dsn string, env ...string) *testproc.Serve {
	t.Helper()
	return testproc.StartServe(t, paysvcBin, name, serveEnv(dsn, env))
}

// startServeWith is startServe with started run on the process as soon
// as it exists: see testproc.StartServeWith.
func startServeWith(t *testing.T, name, dsn string, started func(pid int) error, env ...string) *testproc.Serve {
	t.Helper()
	return testproc.StartServeWith(t, paysvcBin, name, serveEnv(dsn, env), started)
}

// serveEnv is the process environment: the parent's without any PAYSVC_*
// variable (a developer's or CI's settings must not leak in), then the
// suite's settings, then env.
func serveEnv(dsn string, env []string) []string {
	return testproc.Env(append([]string{
		"PAYSVC_DSN=" + dsn,
		"PAYSVC_ADDR=127.0.0.1:0",
		"PAYSVC_API_KEYS=" + merchant + ":" + apiKey,
		"PAYSVC_AUTO_MIGRATE=false",
		"PAYSVC_LOG_LEVEL=info",
	}, env...)...)
}

// insertDueEvents writes n order.closed events of the suite's merchant,
// due now, in one INSERT, as the transaction of a change writes them
// (delivery: the events.delivery column; orders numbered prefix0,
// prefix1, ...), and returns their ids in order.
func insertDueEvents(t *testing.T, gdb *gorm.DB, n int, delivery events.Delivery, prefix string) []string {
	t.Helper()
	now := time.Now().UTC()
	ids := make([]string, n)
	var (
		sb   strings.Builder
		args []any
	)
	sb.WriteString(`INSERT INTO events (id, merchant_id, type, created_at, data, delivery, next_attempt_at) VALUES `)
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("(?, ?, 'order.closed', ?, ?, ?, ?)")
		ids[i] = events.NewIDAt(now)
		args = append(args, ids[i], merchant, now, fmt.Sprintf(`{"order":{"order_no":"%s%d"},"reason":"cancelled"}`, prefix, i), delivery, now)
	}
	if _, err := db.Exec(context.Background(), gdb, sb.String(), args...); err != nil {
		t.Fatal(err)
	}
	return ids
}
