// Package idempotency makes a request take effect at most once per
// (scope, key), across every instance of the service, with the answer the
// first execution gave returned to every duplicate.
//
// # Design: the claim opens the business transaction (one commit)
//
// A request claims its key with the first statement of its business
// transaction, sent with the START TRANSACTION in one round trip:
//
//	START TRANSACTION; INSERT INTO idempotency_records (key_hash, request_hash,
//	  status = PROCESSING, owner, lease_until, expires_at) VALUES (...)
//
// The primary key key_hash, 12 bytes of SHA-256 over (scope, key),
// arbitrates: of any number of concurrent duplicates exactly one INSERT
// succeeds and holds the new row's lock until its transaction ends. The
// others wait for that lock, at most db.LockWaitTimeout (1 s, the smallest
// both MariaDB and MySQL 8.4 accept): if the holder commits they get 1062
// and read its record; if it rolls back, one of them wins the row (the
// others may get 1213, and read); if the wait times out, the holder is
// still running: in flight. A lost claim ends its empty transaction and
// reads the committed record in one more round trip (ROLLBACK; SELECT):
//
//   - another request hash              → ErrKeyReused (422), nothing runs;
//   - COMPLETED                         → the stored response (replay);
//   - still held (lock wait timed out)  → in flight: ErrInFlight with a
//     Retry-After (reject mode), or poll until it completes (wait mode);
//   - past expires_at                   → the window is over: the record is
//     deleted and the key claimed anew, even before purge has run.
//
// The holder runs the business function in the transaction its claim
// opened, stores the response and commits:
//
//	UPDATE idempotency_records SET status = COMPLETED, response_... = ?
//	 WHERE key_hash = ? AND owner = ? AND status = PROCESSING
//	COMMIT
//
// The claim, the business rows and the stored response commit together or
// not at all, in one commit. A record is therefore never seen PROCESSING by
// anyone else: on an error, a 5xx, a conflict or a crash the transaction
// rolls back, claim included, and the key is free for the client's retry at
// once — there is no claim to release, and nothing a crash could leave
// stuck. The business transaction runs under a context bounded by the
// lease (PAYSVC_IDEMPOTENCY_LEASE): a holder stalled past it has its
// connection closed, the server rolls it back, and a duplicate's next
// claim runs the request.
//
// The lease, the owner and the take-over remain for records that an engine
// committing its claim first left PROCESSING (this package before issue 18,
// during a rolling upgrade): such a record is in flight until its lease
// ends, then taken over with one conditional UPDATE naming the old owner
// (checked before the fingerprint: a dead holder stored nothing), inside
// the taker's transaction.
//
// # The design it replaced, and why this one won (issue 18)
//
// Until issue 18 the claim was an autocommitted INSERT before the business
// transaction: a committed PROCESSING record with a lease, and a fence
// UPDATE at the end naming the owner, so that a holder whose lease was
// taken over could not complete. It made the in-flight state a committed
// row (a duplicate saw it without waiting) and cost a second commit and
// two more round trips per first request. Measured on this project's
// 2-core machine (docs/BENCHMARKS.md, section j), the one-commit design
// halves the redo log writes and fsyncs per request and takes a first
// payment callback from 9 round trips and 2 commits to 8 and 1 (a first
// order from 5 and 2 to 4 and 1): 15–21% more orders served, callbacks
// within a few percent, and in a duplicate storm 34–41% more requests with
// no 409 left for the client to retry; every test of the suite — storms in
// both in-flight modes, faults, SIGKILLed processes, cut and black-holed
// connections, Galera — holds. Figures and the designs tried (and the one
// the Galera suite refused, under "Batches") are in docs/BENCHMARKS.md (j).
//
// Issue 18's targets (callbacks at half the throughput of the minimal
// BEGIN; INSERT; COMMIT, orders at 0.60) are not met: here the unit of
// cost is the statement, and a control transaction of 9 of the cheapest
// statements runs at 0.35–0.43 of the minimal one. A first callback needs
// 9 (START TRANSACTION, claim, payment, the order's conditional UPDATE, its
// read for the outbox event — there is no UPDATE … RETURNING — ledger,
// event, stored response, COMMIT); fewer would give up the record, the
// ledger or the event's snapshot of the order.
//
// What it costs, and why each cost is bounded:
//   - an in-flight duplicate waits on the holder's row lock instead of
//     reading a committed row: it holds a pooled connection and an InnoDB
//     lock wait for as long as the holder runs, at most the 1 s lock wait,
//     and then gets the replay (most holders finish in milliseconds) or a
//     409 within about a second, as CONTRACT §4 asks;
//   - a cancelled client does not end the server-side wait (FACTS.md): it
//     lasts until the lock frees or the second is up;
//   - waiters on one key deadlock (1213) when the holder rolls back: the
//     victim reads the record and claims again;
//   - a session orphaned by a network partition keeps its transaction, and
//     the claim's lock, until the server drops it (wait_timeout, one
//     minute: db.SessionIdleTimeout) instead of until the lease; a
//     duplicate meanwhile gets 409, never a second execution;
//   - on a multi-primary cluster the claim is certified with the business
//     rows: duplicates on two nodes both run the business, and one is
//     refused at COMMIT (1213) and, run again, replays.
//
// The business transaction's conflicts (1213, 1205, certification) roll the
// claim back with everything else, and the whole round — claim, business,
// commit — runs again after a jittered backoff while the deadline leaves
// room.
//
// # Round trips
//
// First request: START TRANSACTION + claim (1) + business statements +
// response (1) + COMMIT (1). Replay: START TRANSACTION + INSERT → 1062 (1)
// + ROLLBACK + SELECT (1) = 2. A first payment callback is 9 statements in
// 8 round trips and 1 commit (was 9 round trips and 2 commits), a first
// order 5 statements in 4 round trips. A waiting duplicate
// (PAYSVC_IN_FLIGHT=wait) polls with one SELECT and a claim. A
// server-issued token adds none: its first use claims with a conditional
// UPDATE in place of the INSERT (token.go).
//
// # Batches
//
// Two batches travel as one round trip (db.ExecBatch): START TRANSACTION
// with the claim, and ROLLBACK with the read of the record. Nothing else
// does, although the server stops a batch at its first failing statement:
// on a Galera node a brute-force abort (a conflicting write set from
// another node) can roll a transaction back between two statements of one
// batch, and the rest of the batch then runs outside it, each statement
// committing on its own, without an error. The Galera suite caught it when
// the ledger and event INSERTs, the response and the COMMIT travelled
// together: the response's UPDATE matched nothing, the COMMIT committed
// nothing, and INSERTs sent after such an abort would have committed
// alone. A batch that opens a transaction has nothing to abort yet, and
// one that follows ROLLBACK only reads; a COMMIT is always sent alone, so
// that a transaction aborted before it fails it with 1213.
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
// Lock waits are bounded to 1 s per statement (db.LockWaitTimeout).
//
// Whatever the database cannot do in time becomes an *UnavailableError
// (503 with Retry-After); its transaction is rolled back (or its
// connection closed, which rolls it back on the server). A COMMIT whose
// answer was lost is read back on a small reserve pool (Options.Reserve)
// with a locking read, which waits for a COMMIT still running on the
// server, within a budget of its own of under a second past the deadline.
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
// the window. The lease bounds a request's transaction on the instance's
// own clock (a context deadline), so skew cannot let two executions of a
// key overlap: the claim's row lock, not a time, keeps them apart.
package idempotency
