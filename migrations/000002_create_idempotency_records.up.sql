-- Idempotency records, one per (scope, key): stored for every request, so
-- every column earns its bytes. scope is "m:<merchant>" or "p:<provider>";
-- keys are VARBINARY so that "abc" and "ABC" are different keys (a
-- case-insensitive collation would replay one client's response to another).
-- status: 1 = PROCESSING (owner + lease_until set), 2 = COMPLETED (response_*
-- set, owner and lease_until NULL, so a finished row carries no lease bytes).
-- response_type is a small code for the stored Content-Type (see
-- internal/idempotency). expires_at is creation + window; idx_expires lets
-- purge walk expired rows in batches without scanning the table.
CREATE TABLE idempotency_records (
  scope             VARBINARY(72)  NOT NULL,
  idem_key          VARBINARY(255) NOT NULL,
  request_hash      BINARY(32)     NOT NULL,
  status            TINYINT UNSIGNED NOT NULL,
  owner             BINARY(16)     NULL,
  lease_until       DATETIME(6)    NULL,
  response_status   SMALLINT UNSIGNED NULL,
  response_type     TINYINT UNSIGNED NULL,
  response_location VARBINARY(255) NULL,
  response_body     BLOB NULL,
  created_at        DATETIME(6)    NOT NULL,
  expires_at        DATETIME(6)    NOT NULL,
  PRIMARY KEY (scope, idem_key),
  KEY idx_idempotency_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
