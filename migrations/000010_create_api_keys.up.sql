-- API keys of merchants (README.md, "Merchants and API keys"). The key
-- itself is never stored: key_hash is the SHA-256 of the whole key, and the
-- primary key, so authenticating a key the service has not cached is one
-- primary-key read. prefix is what an operator sees of it ("sk_" and its
-- first 4 characters). id ("key_" + ULID, time-ordered) names the key in
-- the commands. A key is refused from expires_at on (NULL: never) and from
-- revoked_at on (NULL: not revoked). last_used_at is the minute of its last
-- successful use, written at most once a minute and never by the request
-- itself (internal/merchants, cache.go).
CREATE TABLE api_keys (
  key_hash     BINARY(32) NOT NULL,
  id           VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  prefix       VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at   DATETIME(6) NOT NULL,
  expires_at   DATETIME(6) NULL,
  revoked_at   DATETIME(6) NULL,
  last_used_at DATETIME NULL,
  PRIMARY KEY (key_hash),
  UNIQUE KEY uk_api_keys_id (id),
  KEY idx_api_keys_merchant (merchant_id, id),
  CONSTRAINT fk_api_keys_merchant FOREIGN KEY (merchant_id) REFERENCES merchants (merchant_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
