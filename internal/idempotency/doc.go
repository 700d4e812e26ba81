// Package idempotency makes a request take effect at most once per
// (scope, key), across every instance of the service, with the answer the
// first execution gave returned to every duplicate. It owns the
// idempotency_records table: claims, stored responses, windows, tokens and
// purge.
//
// Invariants:
//
//   - The claim is the first statement of the business transaction
//     (START TRANSACTION and the claim INSERT in one round trip), and the
//     stored response its last before COMMIT: the claim, the business rows
//     and the response commit together or not at all, in one commit. A
//     record is never seen PROCESSING by another request, so a failure, a
//     5xx or a crash leaves nothing to release and nothing to take over.
//   - The primary key (a hash of scope and key) arbitrates between
//     concurrent duplicates; a duplicate waits on the holder's row lock for
//     at most db.LockWaitTimeout, then replays, or is answered in flight.
//   - A request's fingerprint binds its key: another request under the same
//     key is ErrKeyReused, and nothing runs.
//   - Only responses below 500 are stored; a record lives its window from
//     its first use and is new again past it, whether or not purge has run.
//   - Everything Do waits for waits under the request's deadline, and the
//     business transaction under the lease: a holder past it has its
//     connection closed and is rolled back. What the database cannot do in
//     time is an *UnavailableError (503), never a stored answer.
//
// Round trips: a first request is START TRANSACTION with the claim, the
// business statements, the response, COMMIT (a first order: 5 statements
// in 4 round trips; a first payment callback: 9 in 8); a replay is 2
// (START TRANSACTION with the claim → 1062; ROLLBACK with the read).
//
// Why it is built this way — one commit rather than a committed claim with
// a lease and a fence, the one-second lock wait, which statements may share
// a round trip on Galera, the record's layout, the clocks — and what each
// choice measured: docs/DESIGN.md, from "The claim opens the business
// transaction" to "Windows end", and "Clocks".
package idempotency
