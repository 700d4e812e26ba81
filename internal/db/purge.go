package db

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"

	"gorm.io/gorm"
)

// DeleteChunk bounds the keys of one DELETE: a list of thousands of keys
// can exceed MySQL 8's range optimizer memory (the statement then scans
// and locks the whole table) or max_allowed_packet.
const DeleteChunk = 1000

// PurgeRest is the rest that keeps a purge of a large backlog from taking
// the server from the requests: four times each batch's duration. On 2
// cores a writer's p99 went to 3.8x its normal value during a flat-out
// purge, 2.2x resting twice as long, 1.4x resting four times, which still
// purges thousands of rows a second, more than the machine can write
// (docs/BENCHMARKS.md, "(e) Purge under load").
const PurgeRest = 4

// maxPurgeConflicts is how many deadlocks or lock waits one pass absorbs
// before it leaves the rest to the next interval.
const maxPurgeConflicts = 5

// Purge is how every purge of the service deletes old rows: a plain SELECT
// of up to Batch keys of the oldest rows to go (Next; it locks nothing),
// then DELETEs of exactly those keys (Delete, given at most DeleteChunk keys
// a call, re-checks whatever may have changed since the SELECT), each in a
// READ COMMITTED transaction of its own, which locks only the rows it
// deletes. A single "DELETE … WHERE <old> ORDER BY … LIMIT n" would lock
// every index entry it scans and the gap after them, and a writer
// inserting into that gap would wait for the whole batch (docs/DESIGN.md,
// "Jobs that a scheduler runs twice"). A deadlock or lock wait with
// another instance's purge is retried after a pause, a few times a pass;
// several instances may purge at once, and a row another deleted first is
// not counted twice.
type Purge struct {
	What  string // what is purged, for errors
	Batch int
	// Rest is how many times a batch's duration the purge pauses after it,
	// so that a backlog does not take the server's CPU, log and buffer
	// pool from the requests; 0 for none.
	Rest   int
	Next   func(ctx context.Context, limit int) ([]any, error)
	Delete func(ctx context.Context, tx *gorm.DB, keys []any) (int64, error)
	// OnBatch, if set, is told each batch's count.
	OnBatch func(deleted int64)
}

// Run purges until Next finds fewer than Batch keys, and returns the rows
// deleted, also when it fails part way.
func (p Purge) Run(ctx context.Context, gdb *gorm.DB) (int64, error) {
	if p.Batch <= 0 {
		return 0, fmt.Errorf("purge %s: batch must be positive, got %d", p.What, p.Batch)
	}
	var total int64
	failed := func(err error) (int64, error) {
		return total, fmt.Errorf("purge %s after %d rows: %w", p.What, total, err)
	}
	conflicts := 0
	for {
		start := time.Now()
		keys, err := p.Next(ctx, p.Batch)
		if err != nil {
			return failed(err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		deleted, err := p.deleteKeys(ctx, gdb, keys)
		total += deleted
		if err != nil {
			// The next batch takes these keys again after a pause.
			if IsRetryable(err) && conflicts < maxPurgeConflicts {
				conflicts++
				pause := time.Duration(conflicts) * 100 * time.Millisecond
				if Sleep(ctx, pause/2+rand.N(pause)) == nil {
					continue
				}
			}
			return failed(err)
		}
		if p.OnBatch != nil {
			p.OnBatch(deleted)
		}
		if len(keys) < p.Batch {
			return total, nil
		}
		if err := Sleep(ctx, time.Duration(p.Rest)*time.Since(start)); err != nil {
			return failed(err)
		}
	}
}

// deleteKeys runs Delete on keys a chunk at a time, each chunk in its own
// READ COMMITTED transaction, and returns the rows deleted, also when it
// fails part way.
func (p Purge) deleteKeys(ctx context.Context, gdb *gorm.DB, keys []any) (int64, error) {
	var total int64
	for len(keys) > 0 {
		// The chunk's capacity ends with it: a Delete that appends its own
		// arguments to the keys then gets a copy, and cannot write over the
		// first key of the next chunk.
		size := min(DeleteChunk, len(keys))
		chunk := keys[:size:size]
		keys = keys[size:]
		var n int64
		err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var err error
			n, err = p.Delete(ctx, tx, chunk)
			return err
		}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
