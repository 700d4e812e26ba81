package app

import (
	"fmt"

	"github.com/paysvc/paysvc/internal/config"
)

// fileReserve is what an instance keeps of its open-file limit for what
// is not an HTTP connection or a database pool: the relays' calls to
// merchants and providers (up to 64 each at once), NATS, Redis, its own
// files, with room to spare.
const fileReserve = 256

// minConns is the fewest HTTP connections an instance starts with.
const minConns = 64

// unknownFileLimitConns is the default of PAYSVC_MAX_CONNS where the
// open-file limit cannot be read.
const unknownFileLimitConns = 4096

// MaxConns is the most HTTP connections the instance holds open
// (README.md, "Configuration"): PAYSVC_MAX_CONNS, or, when 0, the
// open-file limit (fileLimit, if known) less the database pools and
// fileReserve, so that a connection can always be accepted without
// running out of files. An explicit value above that, or a limit that
// leaves fewer than minConns, stops the start.
func MaxConns(cfg config.Config, fileLimit uint64, known bool) (int, error) {
	if !known {
		if cfg.MaxConns > 0 {
			return cfg.MaxConns, nil
		}
		return unknownFileLimitConns, nil
	}
	others := uint64(cfg.DBMaxConns + reserveConns + relayConns + upkeepConns + fileReserve)
	room := 0
	if fileLimit > others {
		room = int(min(fileLimit-others, 1<<30))
	}
	switch {
	case cfg.MaxConns == 0 && room < minConns:
		return 0, fmt.Errorf("PAYSVC_MAX_CONNS: the open-file limit %d leaves %d connections beside %d other files "+
			"(the database pools and %d more); raise it (ulimit -n) to at least %d", fileLimit, room, others, fileReserve, others+minConns)
	case cfg.MaxConns == 0:
		return room, nil
	case cfg.MaxConns > room:
		return 0, fmt.Errorf("PAYSVC_MAX_CONNS: %d is more than the open-file limit %d leaves for connections (%d beside %d other files); "+
			"lower it or raise the limit (ulimit -n)", cfg.MaxConns, fileLimit, room, others)
	}
	return cfg.MaxConns, nil
}
