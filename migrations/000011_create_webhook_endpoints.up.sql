-- Webhook endpoints a merchant manages through the API (README.md,
-- "Webhook endpoints"). id is "we_" + ULID. enabled_events is the
-- filter as the API wrote it: a comma-separated list of event types, or
-- "*" for every type; the relay reads it when it fans an event out.
-- status: 0 enabled, 1 disabled; disabled_reason: NULL, 'manual' or
-- 'failing'. failing_since is when the endpoint's current run of failed
-- attempts began (NULL after a success): the relay disables the endpoint
-- once it is older than PAYSVC_ENDPOINT_DISABLE_AFTER. The merchant's row
-- is locked to create one, so that the endpoint limit holds whatever the
-- concurrency (idx_webhook_endpoints_merchant serves the count and the
-- list).
CREATE TABLE webhook_endpoints (
  id              VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  url             VARCHAR(2048) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  description     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  enabled_events  VARCHAR(1024) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status          TINYINT UNSIGNED NOT NULL DEFAULT 0,
  disabled_reason VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  disabled_at     DATETIME(6) NULL,
  failing_since   DATETIME(6) NULL,
  created_at      DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  KEY idx_webhook_endpoints_merchant (merchant_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
