// Package idempotency makes a request take effect at most once per
// (scope, key), across every instance of the service, with the answer the
// first execution gave returned to every duplicate.
//
// # Design: a committed claim, a lease and a fence
//
// A request first claims its key with one autocommitted INSERT of a
// PROCESSING record (request hash, owner token, lease_until, expires_at).
// The primary key key_hash, 12 bytes of SHA-256 over (scope, key), arbitrates: of any number of concurrent
// duplicates exactly one INSERT succeeds; the others get 1062 at once (the
// row is committed, so nobody waits on a lock — except in the instant
// between a holder's fence and its COMMIT, when the fence's row lock makes a
// duplicate's INSERT wait for that commit; a wait that times out counts as
// in flight) and read the record:
//
//   - another request hash              → ErrKeyReused (422), nothing runs;
//   - COMPLETED                         → the stored response (replay);
//   - PROCESSING, lease still running   → in flight: ErrInFlight with a
//     Retry-After (reject mode), or poll until it completes (wait mode);
//   - PROCESSING, lease run out         → take it over with one conditional
//     UPDATE naming the old owner; of concurrent takers one wins. This is
//     checked before the fingerprint: a dead holder stored nothing, so, as
//     after a 5xx, the key is bound to whichever request takes it next;
//   - past expires_at                   → the window is over: the record is
//     deleted and the key claimed anew, even before purge has run.
//
// The holder then runs the business function in ONE local transaction that
// ends with the fence:
//
//	UPDATE idempotency_records SET status = COMPLETED, response_... = ?
//	 WHERE key_hash = ? AND owner = ? AND status = PROCESSING
//
// The business rows and the stored response commit together or not at all.
// If the fence matches no row, the lease was taken over (the holder was too
// slow, or was presumed dead): the transaction rolls back, so a holder whose
// lease was taken can never complete, and the request is answered like any
// duplicate of the new holder.
//
// On an error or a 5xx the transaction rolls back and the claim is deleted
// (owner-checked), so the key is free for the client's retry at once. If the
// process dies instead, the database rolls the transaction back when the
// connection drops and the PROCESSING claim is taken over once its lease
// (PAYSVC_IDEMPOTENCY_LEASE) runs out. The business transaction runs under a
// context bounded by the lease, so a live holder stops before it could be
// taken over in the common case; the fence makes the rare case safe.
//
// # Why not claim inside the business transaction
//
// The alternative, INSERTing the record as the first statement of the
// business transaction, needs no lease: a duplicate's INSERT blocks on the
// uncommitted row until the first commits (1062) or rolls back (it wins).
// We measured the price on MariaDB: every in-flight duplicate then holds a
// pooled connection and an InnoDB lock wait, "reject within a second" means
// lowering innodb_lock_wait_timeout for every statement, a cancelled client
// does not free the server-side wait, and three waiters on one key deadlock
// (1213) when the holder rolls back. A committed claim costs one extra
// autocommitted statement per first request and makes the in-flight state
// visible, instant to detect, and explicit in the table.
//
// # Round trips
//
// First request: INSERT claim (1) + BEGIN (1) + business statements +
// fence UPDATE (1) + COMMIT (1). Replay: INSERT (1062) + SELECT = 2. A
// waiting duplicate (PAYSVC_IN_FLIGHT=wait) polls with one SELECT. A
// server-issued token adds none: its first use claims with a conditional
// UPDATE in place of the INSERT (token.go).
//
// # Overload, conflicts and outages (CONTRACT §9)
//
// Do works under a deadline (Options.Timeout, PAYSVC_REQUEST_TIMEOUT), and
// everything it waits for — a pooled connection, a row lock, a retry's
// backoff — waits under it. Each claim round takes one connection from the
// pool and keeps it for the claim and, if the claim wins, for the business
// transaction: a holder never queues for the pool again behind the
// duplicates it is keeping in flight (it did, and database/sql hands a
// freed connection to a random waiter: docs/BENCHMARKS.md, "Overload").
// A conflict (1213 deadlock or Galera certification failure, 1205 lock
// wait timeout) re-runs the whole transaction after a jittered, doubling
// delay for as long as the deadline leaves room. Lock waits are bounded to
// 1 s per statement (db.LockWaitTimeout), so a claim INSERT that waits on a
// holder's fence is answered in flight within about a second.
//
// Whatever the database cannot do in time becomes an *UnavailableError
// (503 with Retry-After). The claim is then released on a small reserve
// pool (Options.Reserve), so that a saturated request pool cannot keep a
// failed request's key in flight until its lease ends; the release and the
// read-back of a COMMIT whose answer was lost (a locking read, which waits
// for a COMMIT still running on the server) get a budget of their own of
// about a second past the deadline. If the database is out of reach even
// for that, the lease frees the key.
//
// # What a record costs
//
// A record is written for every request and kept for its window, so its
// layout is chosen by the byte (migration 000002): a 12-byte key hash
// instead of the key as primary key (the expiry index repeats it), 8 bytes
// of the request's fingerprint, no creation time (expires_at says all the
// window needs), and the response deflated with a preset dictionary
// (encoding.go). Measured at 300,000
// records in arrival order: docs/BENCHMARKS.md.
//
// # Clocks
//
// Lease and window times come from the injected clock of the instance that
// writes them. Instances must keep their clocks in sync (NTP) to well within
// the lease; the fence keeps even a badly skewed instance from completing a
// request another instance has taken over.
package idempotency
