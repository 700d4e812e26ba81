package experiments

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/migrate"
)

// What the arbiter's index does to keys that are not duplicates. The
// claim is an INSERT whose unique index decides between duplicates. When
// that index is the clustered one (key_hash as primary key, migration
// 000002), InnoDB's duplicate check locks the existing record only. When
// it is a unique secondary index (a time-ordered table: an AUTO_INCREMENT
// primary key, UNIQUE (key_hash)), the check takes a next-key lock, the
// record and the gap before it, under READ COMMITTED too; a duplicate
// that waits for a running holder queues that lock, and an unrelated new
// key whose hash falls in the gap waits behind it until the duplicate's
// wait ends. The experiment holds a claim open, sends its duplicate, then
// a new key just below it, and records which finished first.

// KeyLayoutConfig sets how long the holder runs and when the others come.
type KeyLayoutConfig struct {
	Hold       time.Duration // the holder's transaction, open this long
	Duplicate  time.Duration // the duplicate arrives this long after the holder
	NewKey     time.Duration // the unrelated key arrives this long after the holder
	Isolations []string      // transaction isolation levels tried
}

// DefaultKeyLayout: the holder runs 3 s (under the 30 s lease), its
// duplicate comes at 100 ms and waits its 1 s, the new key comes at 300 ms.
func DefaultKeyLayout() KeyLayoutConfig {
	return KeyLayoutConfig{Hold: 3 * time.Second, Duplicate: 100 * time.Millisecond, NewKey: 300 * time.Millisecond,
		Isolations: []string{"REPEATABLE READ", "READ COMMITTED"}}
}

// KeyLayoutRow is one layout under one isolation level.
type KeyLayoutRow struct {
	Layout, Isolation string
	// NewKeyWait is how long the new key's claim took; NewKeyBlocked that
	// it was answered only as the duplicate's lock wait ended.
	NewKeyWait    time.Duration
	NewKeyBlocked bool
	NewKeyErr     string
	DuplicateErr  string
}

// KeyLayoutResult lists both layouts.
type KeyLayoutResult struct {
	Config KeyLayoutConfig
	Rows   []KeyLayoutRow
}

// Markdown renders the result.
func (r KeyLayoutResult) Markdown() string {
	t := newTable("arbiter of the claim", "isolation", ">new key's claim took", "new key waited for the duplicate", "new key's claim", "duplicate's claim")
	for _, row := range r.Rows {
		t.add(row.Layout, row.Isolation, fmt.Sprintf("%d ms", row.NewKeyWait.Milliseconds()), yesNo(row.NewKeyBlocked),
			orOK(row.NewKeyErr), orOK(row.DuplicateErr))
	}
	return t.String() + fmt.Sprintf("\nA claim [START TRANSACTION; INSERT] of key K held open %v; the same key's claim %v later "+
		"(it waits for the holder, at most innodb_lock_wait_timeout = %d s, the service's); %v after the holder, the claim of a new "+
		"key whose hash sorts just below K's. Scratch tables with the service's record columns.\n",
		r.Config.Hold, r.Config.Duplicate, db.LockWaitTimeout, r.Config.NewKey)
}

func orOK(s string) string {
	if s == "" {
		return "inserted"
	}
	return s
}

// RunKeyLayout runs the interleaving on both layouts at each isolation.
func RunKeyLayout(ctx context.Context, serverDSN string, cfg KeyLayoutConfig, logf func(string, ...any)) (KeyLayoutResult, error) {
	res := KeyLayoutResult{Config: cfg}
	layouts := []struct{ name, alter string }{
		{"PRIMARY KEY (key_hash): today's", ""},
		{"UNIQUE KEY (key_hash), AUTO_INCREMENT primary key: time-ordered", `ALTER TABLE idempotency_records
		  ADD COLUMN id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT FIRST, DROP PRIMARY KEY, ADD PRIMARY KEY (id),
		  ADD UNIQUE KEY uk_idempotency_key (key_hash)`},
	}
	for _, l := range layouts {
		err := withScratch(ctx, serverDSN, "keylayout", func(s *scratch) error {
			if err := migrate.Up(s.cfg); err != nil {
				return err
			}
			if l.alter != "" {
				if err := s.exec(ctx, l.alter); err != nil {
					return err
				}
			}
			// Every run rolls all its claims back: the table is empty again.
			for _, iso := range cfg.Isolations {
				logf("  %s, %s", l.name, iso)
				row, err := keyLayoutRun(ctx, s, cfg, iso)
				for tries := 1; errors.Is(err, errDuplicateNotSeen) && tries < keyLayoutTries; tries++ {
					logf("    %v (a loaded machine): once more", err)
					row, err = keyLayoutRun(ctx, s, cfg, iso)
				}
				row.Layout, row.Isolation = l.name, iso
				res.Rows = append(res.Rows, row)
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// errDuplicateNotSeen: the run's interleaving did not happen (the
// duplicate's claim had not been seen waiting for the holder before the
// holder's time was up, as on a loaded machine), so the run shows nothing
// and is made again, up to keyLayoutTries times in all.
var errDuplicateNotSeen = errors.New("the duplicate's claim was never seen waiting for its holder")

const keyLayoutTries = 3

// waitedMargin is how much earlier than a lock wait after the duplicate
// was sent the new key's answer may come and still count as having
// waited for it (the clocks of client and server steps).
const waitedMargin = 100 * time.Millisecond

func keyLayoutRun(ctx context.Context, s *scratch, cfg KeyLayoutConfig, iso string) (KeyLayoutRow, error) {
	var row KeyLayoutRow
	held := idempotency.KeyHash("m:acme", "order-held")
	// A new key whose hash sorts below the held one: in the gap before it.
	var below []byte
	for i := 0; below == nil; i++ {
		if h := idempotency.KeyHash("m:acme", fmt.Sprintf("order-new-%d", i)); bytes.Compare(h, held) < 0 {
			below = h
		}
	}
	claim := func(conn *sql.Conn, key []byte) error {
		if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL "+iso); err != nil {
			return err
		}
		_, err := db.ExecBatchConn(ctx, conn, `START TRANSACTION; INSERT INTO idempotency_records
			(key_hash, request_hash, status, expires_at) VALUES (?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`, key, make([]byte, 8))
		return err
	}
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		c, err := s.sql.Conn(ctx)
		if err != nil {
			return row, err
		}
		// The claims are statements, not a database/sql transaction: a
		// run that ends early rolls them back, or the connection would go
		// back to the pool with its locks.
		defer func() {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			c.Close()
		}()
		conns[i] = c
	}
	var dupThread int64
	if err := conns[1].QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&dupThread); err != nil {
		return row, err
	}
	// lockWaiting says whether the session of thread waits for a row lock.
	lockWaiting := func(thread int64) (bool, error) {
		var n int64
		err := s.sql.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.INNODB_TRX
			WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'`, thread).Scan(&n)
		return n > 0, err
	}
	start := time.Now()
	if err := claim(conns[0], held); err != nil {
		return row, fmt.Errorf("holder: %w", err)
	}
	type done struct {
		at  time.Time
		err error
	}
	dup, fresh := make(chan done, 1), make(chan done, 1)
	dupSent := make(chan time.Time, 1)
	go func() {
		time.Sleep(cfg.Duplicate)
		dupSent <- time.Now()
		err := claim(conns[1], held)
		dup <- done{time.Now(), err}
	}()
	// The new key's claim starts once the duplicate is seen waiting (not
	// merely after a delay, which a loaded machine can outlast).
	time.Sleep(cfg.NewKey)
	for {
		waiting, err := lockWaiting(dupThread)
		if err != nil {
			return row, err
		}
		if waiting {
			break
		}
		if time.Since(start) > cfg.Hold {
			return row, errDuplicateNotSeen
		}
		time.Sleep(5 * time.Millisecond)
	}
	freshStart := time.Now()
	go func() {
		err := claim(conns[2], below)
		fresh <- done{time.Now(), err}
	}()
	// The new key waited for the duplicate when it got its answer only as
	// the duplicate gave up (MariaDB does not list a claim queued this way
	// among INNODB_TRX's lock waits). The server ends the duplicate's wait
	// a lock wait after it received the claim, so no earlier than a lock
	// wait after it was sent: a new key that waited cannot have its answer
	// before then, however loaded the machine, and one that did not
	// answers in milliseconds, long before. Neither the duplicate's
	// answer, seen late on a loaded machine, nor the claim's own duration,
	// which a stall stretches, tells it as surely.
	f, d := <-fresh, <-dup
	row.NewKeyBlocked = !f.at.Before((<-dupSent).Add(time.Duration(db.LockWaitTimeout)*time.Second - waitedMargin))
	time.Sleep(max(0, cfg.Hold-time.Since(start)))
	for _, c := range conns {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	}
	row.NewKeyWait = f.at.Sub(freshStart)
	if f.err != nil {
		row.NewKeyErr = f.err.Error()
	}
	switch {
	case d.err == nil:
		return row, fmt.Errorf("the duplicate's claim succeeded while its holder was open")
	case db.IsLockWaitTimeout(d.err):
		row.DuplicateErr = "lock wait timeout (in flight)"
	default:
		row.DuplicateErr = d.err.Error()
	}
	return row, nil
}
