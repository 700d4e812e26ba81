package bench

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
	"github.com/paysvc/paysvc/internal/webhooks"
)

// service is paysvc assembled by internal/app over the scratch database and
// served by app.Serve on a loopback listener, with an HTTP client for it.
type service struct {
	app    *app.App
	url    string
	client *http.Client
	secret webhooks.Secret
	stop   func() error
}

// startService opens the service with config.Defaults(), the scratch DSN, a
// merchant key and a webhook secret for provider mockpay, logging at error
// level to nowhere. Everything the service runs — the pool's goroutines,
// the server and its connections — inherits the profiler label side=server,
// so a CPU profile tells it apart from the benchmark's clients.
func startService(ctx context.Context, dsn string, maxWorkers int) (*service, error) {
	return startServiceWith(ctx, dsn, maxWorkers, nil, app.Options{})
}

// startServiceWith is startService with tune (nil: none) applied to the
// configuration and opts passed to app.Open.
func startServiceWith(ctx context.Context, dsn string, maxWorkers int, tune func(*config.Config), opts app.Options) (*service, error) {
	key := make([]byte, 32)
	_, _ = crand.Read(key)
	secretText := "whsec_" + base64.StdEncoding.EncodeToString(key)
	secret, err := webhooks.ParseSecret(secretText)
	if err != nil {
		return nil, err
	}
	cfg := config.Defaults()
	cfg.DSN = dsn
	cfg.APIKeys = map[string]string{apiKey: merchantID}
	cfg.WebhookSecrets = map[string][]string{provider: {secretText}}
	cfg.LogLevel = slog.LevelError
	if tune != nil {
		tune(&cfg)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: cfg.LogLevel}))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var (
		a       *app.App
		openErr error
	)
	serveCtx, cancelServe := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	pprof.Do(ctx, pprof.Labels("side", "server"), func(ctx context.Context) {
		openCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		a, openErr = app.Open(openCtx, cfg, log, opts)
		if openErr != nil {
			return
		}
		go func() { served <- a.Serve(serveCtx, ln) }()
	})
	if openErr != nil {
		cancelServe()
		ln.Close()
		return nil, fmt.Errorf("app.Open: %w", openErr)
	}
	idle := 2*maxWorkers + 16
	client := &http.Client{
		Transport: &http.Transport{
			MaxIdleConns:        idle,
			MaxIdleConnsPerHost: idle,
			IdleConnTimeout:     2 * time.Minute,
			DisableCompression:  true,
		},
		Timeout: time.Minute,
	}
	s := &service{app: a, url: "http://" + ln.Addr().String(), client: client, secret: secret}
	s.stop = func() error {
		client.CloseIdleConnections()
		cancelServe()
		err := <-served
		if cerr := a.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return s, nil
}

// reply is what the benchmark checks of a response.
type reply struct {
	status   int
	replayed bool
	body     []byte
}

// post sends one request and reads the whole response, so that the
// keep-alive connection goes back to the pool.
func (s *service) post(ctx context.Context, path string, h http.Header, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+path, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: b}, nil
}

// callbackHeader is the Standard Webhooks header set of one delivery,
// signed now.
func (s *service) callbackHeader(id string, body []byte) http.Header {
	now := time.Now()
	h := make(http.Header, 4)
	h.Set("Content-Type", "application/json")
	h.Set(webhooks.HeaderID, id)
	h.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(webhooks.HeaderSignature, webhooks.Sign(s.secret, id, now, body))
	return h
}

func orderHeader(key string) http.Header { return orderHeaderAs(apiKey, key) }

// orderHeaderAs is orderHeader with bearer as the API key.
func orderHeaderAs(bearer, key string) http.Header {
	h := make(http.Header, 3)
	h.Set("Content-Type", "application/json")
	h.Set("Authorization", "Bearer "+bearer)
	h.Set("Idempotency-Key", key)
	return h
}

// callback delivers ev signed now as webhook-id id, and checks the answer:
// 200, a replay when dup.
func (s *service) callback(ctx context.Context, id string, ev event, dup bool) error {
	rep, err := s.post(ctx, "/v1/callbacks/"+provider, s.callbackHeader(id, ev.body), ev.body)
	if err != nil {
		return err
	}
	return rep.expect(http.StatusOK, dup)
}

// expect checks a reply's status and replay marker.
func (r reply) expect(status int, replayed bool) error {
	if r.status != status || r.replayed != replayed {
		b := r.body
		if len(b) > 300 {
			b = b[:300]
		}
		return fmt.Errorf("got %d (replayed=%t), want %d (replayed=%t): %s", r.status, r.replayed, status, replayed, b)
	}
	return nil
}
