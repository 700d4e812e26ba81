-- Idempotency records: one row per (scope, key), written for
-- every request and kept for its window, so every byte counts (measured at
-- 300,000 rows: docs/BENCHMARKS.md, storage).
--
-- key_hash is the first 12 bytes of SHA-256(scope, 0x00, key): a fixed
-- 12-byte primary key instead of (scope, idem_key) of up to 327 bytes, which
-- the clustered index and idx_idempotency_expires both repeat. Keys stay
-- exact (binary, case-sensitive). 96 bits: among a billion live keys an
-- accidental collision has odds of about 1 in 10^11, and making another
-- tenant's key collide takes a second preimage (2^96 hashes). The key itself
-- is not kept: to find a key's record, hash it (idempotency.KeyHash, or in
-- SQL LEFT(UNHEX(SHA2(CONCAT(scope, 0x00, key), 256)), 12)).
-- request_hash is the first 8 bytes of the request's SHA-256 fingerprint:
-- it only tells one client's requests under one of its keys apart (another
-- request is a 422), so only that client could aim a collision, at itself.
-- status: 1 = PROCESSING (seen only by the transaction of its claim, which
-- commits the record COMPLETED), 2 = COMPLETED (response_* set), 3 = ISSUED
-- (a token not used yet).
-- response_format names the Content-Type (low 4 bits) and how response
-- holds Location and body (high 4 bits: 0 plain, 1 deflated with a preset
-- dictionary); see internal/idempotency/encoding.go. expires_at is creation
-- + window (no created_at: the window needs only its end). It keeps
-- microseconds although seconds would be 3 bytes shorter: in
-- idx_idempotency_expires, entries of equal expires_at are ordered by the
-- random key_hash, so with whole seconds inserts land mid-page and leave the
-- index half empty (measured: 54 B/row against 31).
CREATE TABLE idempotency_records (
  key_hash        BINARY(12)       NOT NULL,
  request_hash    BINARY(8)        NOT NULL,
  status          TINYINT UNSIGNED NOT NULL,
  response_status SMALLINT UNSIGNED NULL,
  response_format TINYINT UNSIGNED NULL,
  response        BLOB             NULL,
  expires_at      DATETIME(6)      NOT NULL,
  PRIMARY KEY (key_hash),
  KEY idx_idempotency_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
