package stripe

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/paysvc/paysvc/internal/payments"
	"github.com/paysvc/paysvc/internal/providers"
	"github.com/paysvc/paysvc/internal/validate"
)

// FuzzParse: whatever a (signed) body holds, Parse returns a valid event,
// ErrUnhandled or a validate.Error — never panics, never anything else —
// and a mapped event decodes again, through the generic decoder, to itself.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"refund.updated","data":{"object":{"status":"succeeded","metadata":{"order_no":1,"refund_no":null}}}}`))
	f.Add([]byte(`{"type":"payment_intent.succeeded","data":{"object":{"metadata":{"order_no":"A"},"currency":"ǆǆǆ"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Parse(body)
		var ve *validate.Error
		switch {
		case errors.Is(err, providers.ErrUnhandled), errors.As(err, &ve):
			return
		case err != nil:
			t.Fatalf("unexpected error kind: %v", err)
		}
		again, err := payments.DecodeEvent(payments.EventBody(ev))
		if err != nil || again != ev {
			t.Fatalf("mapped event does not round-trip: %+v (%v)", again, err)
		}
	})
}
