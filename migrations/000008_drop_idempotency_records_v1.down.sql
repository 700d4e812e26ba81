-- Layout 1 as migration 000002 made it, empty (see 000007's down).
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
