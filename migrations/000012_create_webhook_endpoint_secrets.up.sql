-- The signing secrets of webhook endpoints, never in clear: sealed is
-- the secret's key sealed with AES-256-GCM under PAYSVC_SECRETS_KEY (a
-- 12-byte nonce, then the ciphertext and its tag), bound to its endpoint
-- and id as additional data, so a sealed secret copied to another row
-- does not open. key_id is the first 8 bytes of the SHA-256 of the key
-- that sealed it: `paysvc secrets rewrap` finds the rows still sealed
-- under PAYSVC_SECRETS_KEY_OLD by it. A secret signs until expires_at
-- (NULL: the current secret, until the next rotation). id is "ws_" +
-- ULID: the newest is the current one.
CREATE TABLE webhook_endpoint_secrets (
  endpoint_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  id          VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  key_id      BINARY(8) NOT NULL,
  sealed      VARBINARY(128) NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  expires_at  DATETIME(6) NULL,
  PRIMARY KEY (endpoint_id, id),
  KEY idx_webhook_endpoint_secrets_key (key_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
