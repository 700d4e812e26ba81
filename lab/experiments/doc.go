// Package experiments reproduces, on the real database, the measurements
// that paysvc's idempotency design rests on (docs/EXPERIMENTS.md):
//
//   - check-then-insert: SELECT-then-INSERT against INSERT-first under
//     concurrent duplicates;
//   - commit-order: where the dedup record commits relative to the business
//     write, with injected failures between the two;
//   - window: a retention window shorter than the client's retry horizon,
//     on the real schema and engine, with and without a permanent unique
//     backstop;
//   - claim-styles: throughput of three ways to claim a key (INSERT IGNORE,
//     INSERT ... ON DUPLICATE KEY UPDATE, plain INSERT catching 1062).
//
// THESE ARE TEACHING DESIGNS, AND SEVERAL ARE DELIBERATELY BROKEN:
// check-then-insert executes the business several times per key, a dedup
// record committed apart from the business loses or doubles work, a window
// without a backstop lets a late retry through. They are kept here, out of
// the service code, so that the numbers can be re-measured by anyone with
// `go run ./lab/cmd/experiments`. Service code must never import this package; only
// cmd/paysvc (the subcommand) and this package's tests do.
//
// Every experiment creates its own scratch database (paysvc_x_<name>_<hex>)
// on the server it is given, creates the tables it needs with plain CREATE
// TABLE statements (the window experiment migrates the real schema, because
// the real unique keys are its point), and drops the database when it ends,
// whether it succeeded or not. A process killed mid-run leaves its scratch
// database behind; `SHOW DATABASES LIKE 'paysvc\_x\_%'` finds it.
//
// Raw SQL goes through database/sql with client-side interpolation
// (interpolateParams=true, set by db.Config), as the service does. Claims
// are judged by RowsAffected or by error 1062, never through gorm's
// OnConflict{DoNothing}: on MariaDB gorm appends RETURNING to that insert
// and then reports RowsAffected = 1 for a row that already existed
// (claim-styles checks it on every run; db.Open sets DisableWithReturning
// for that reason).
package experiments
