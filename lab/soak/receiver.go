package soak

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paysvc/paysvc/client"
)

// Receiver modes: the nemesis makes the merchant's endpoint fail.
const (
	receiverOK   int32 = iota
	receiver500        // answers 500 without processing
	receiverHang       // holds the request past paysvc's notify timeout
)

// receiver is the merchants' webhook endpoints: under /{merchant} their
// PAYSVC_NOTIFY_ENDPOINTS endpoint, under /api/{merchant} the endpoint
// each registered through the API, with a secret of its own. It verifies
// each delivery (package client's Verifier) and records it by webhook-id.
type receiver struct {
	verifier *client.Verifier
	hang     time.Duration
	mode     atomic.Int32

	mu       sync.Mutex
	api      map[string]*client.Verifier // by path
	got      map[string]Received
	badSig   int
	refused  int
	answered int
}

func newReceiver(v *client.Verifier, hang time.Duration) *receiver {
	return &receiver{verifier: v, hang: hang, got: map[string]Received{}, api: map[string]*client.Verifier{}}
}

// addEndpoint makes path an API endpoint whose deliveries v verifies.
func (r *receiver) addEndpoint(path string, v *client.Verifier) {
	r.mu.Lock()
	r.api[path] = v
	r.mu.Unlock()
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "unreadable", http.StatusBadRequest)
		return
	}
	switch r.mode.Load() {
	case receiver500:
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		http.Error(w, "the merchant's endpoint is failing", http.StatusInternalServerError)
		return
	case receiverHang:
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		select {
		case <-time.After(r.hang):
		case <-req.Context().Done():
		}
		http.Error(w, "too late", http.StatusServiceUnavailable)
		return
	}
	r.mu.Lock()
	v, api := r.api[req.URL.Path]
	r.mu.Unlock()
	if !api {
		v = r.verifier
	}
	ev, err := v.VerifyEvent(req.Header, body)
	if err != nil {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	g := r.got[ev.ID]
	g.Type, g.OrderNo = string(ev.Type), ev.Data.Order.OrderNo
	// Every merchant's PAYSVC_NOTIFY_ENDPOINTS endpoint shares one secret,
	// so the signature cannot tell one merchant's from another's: the path
	// it came to is what says whose endpoint got it.
	if m := strings.TrimPrefix(strings.TrimPrefix(req.URL.Path, "/api"), "/"); !slices.Contains(g.Merchants, m) {
		g.Merchants = append(g.Merchants, m)
	}
	if api {
		g.EndpointDeliveries++
	} else {
		g.Deliveries++
	}
	r.got[ev.ID] = g
	r.answered++
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) snapshot() map[string]Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]Received, len(r.got))
	for k, v := range r.got {
		v.Merchants = slices.Clone(v.Merchants)
		out[k] = v
	}
	return out
}
