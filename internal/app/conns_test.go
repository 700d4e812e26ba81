package app_test

import (
	"strings"
	"testing"

	"github.com/paysvc/paysvc/internal/app"
	"github.com/paysvc/paysvc/internal/config"
)

// TestMaxConns: the default is the open-file limit less the database
// pools (32 + 4 + 4) and 256 more files; an explicit value must fit under
// the limit, and a limit that leaves too little stops the start, naming
// the variable.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		set       int
		limit     uint64
		known     bool
		want      int
		wantError bool
	}{
		{"default from 512 files", 0, 512, true, 214, false},
		{"default from 1024 files", 0, 1024, true, 726, false},
		{"default from 65536 files", 0, 65536, true, 65238, false},
		{"unlimited files", 0, ^uint64(0), true, 1 << 30, false},
		{"explicit, below the limit", 100, 512, true, 100, false},
		{"explicit, above what the limit leaves", 300, 512, true, 0, true},
		{"a limit that leaves too little", 0, 300, true, 0, true},
		{"limit unknown", 0, 0, false, 4096, false},
		{"limit unknown, explicit", 50, 0, false, 50, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.MaxConns = tc.set
			got, err := app.MaxConns(cfg, tc.limit, tc.known)
			switch {
			case tc.wantError && (err == nil || !strings.HasPrefix(err.Error(), "PAYSVC_MAX_CONNS: ")):
				t.Errorf("MaxConns = %d, %v; want an error naming PAYSVC_MAX_CONNS", got, err)
			case !tc.wantError && (err != nil || got != tc.want):
				t.Errorf("MaxConns = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
