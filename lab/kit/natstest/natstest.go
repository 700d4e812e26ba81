// Package natstest runs a nats-server with JetStream of one caller's own: a
// free loopback port and a store directory, so tests and benchmarks run in
// parallel, and one may kill the server and start it again on the same
// port and store to play a broker crash.
package natstest

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/paysvc/paysvc/internal/natsintake"
	"github.com/paysvc/paysvc/lab/kit/testproc"
)

// answerWithin bounds the wait for a started server's first connection;
// generous, because the machine is shared.
const answerWithin = 15 * time.Second

// Broker is one nats-server -js. Its port and store are chosen when it is
// made and kept across Kill and Start.
type Broker struct {
	Addr string // 127.0.0.1:port
	URL  string // nats://Addr
	port int
	dir  string
	cmd  *exec.Cmd
}

// New chooses a free port for a broker that stores its streams in dir; the
// broker is not started.
func New(dir string) (*Broker, error) {
	port, err := testproc.FreePort()
	if err != nil {
		return nil, fmt.Errorf("natstest: free port: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	return &Broker{Addr: addr, URL: "nats://" + addr, port: port, dir: dir}, nil
}

// Start runs the broker and returns once it accepts a connection.
func (b *Broker) Start(ctx context.Context) error {
	cmd := exec.Command("nats-server", "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(b.port), "-sd", b.dir)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := testproc.Start(cmd); err != nil {
		return fmt.Errorf("start nats-server (scripts/ensure-nats.sh installs it): %w", err)
	}
	b.cmd = cmd
	for deadline := time.Now().Add(answerWithin); ; time.Sleep(50 * time.Millisecond) {
		nc, err := nats.Connect(b.URL)
		if err == nil {
			nc.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.Kill()
			return fmt.Errorf("nats-server on %s did not answer: %w", b.Addr, err)
		}
	}
}

// Kill SIGKILLs a started broker: what it had not written to its store is
// lost, as in a crash. A broker that is not running is left as it is.
func (b *Broker) Kill() {
	if b.cmd != nil {
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
		b.cmd = nil
	}
}

// StartOrFail is Start for a test: a broker that does not come up fails it.
func (b *Broker) StartOrFail(t testing.TB) {
	t.Helper()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Stopped is a broker of the test's own, not started yet, with its store in
// the test's temporary directory; it is killed when the test ends.
func Stopped(t testing.TB) *Broker {
	t.Helper()
	b, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b
}

// Started is Stopped, started.
func Started(t testing.TB) *Broker {
	t.Helper()
	b := Stopped(t)
	b.StartOrFail(t)
	return b
}

// IntakeStream connects to the broker at url, reconnecting for as long as
// the test runs, and makes sure the intake's stream exists (messages kept
// an hour); the connection closes with the test.
func IntakeStream(t testing.TB, url string) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := natsintake.EnsureStream(ctx, js, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return js, stream
}
