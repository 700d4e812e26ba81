-- Deliveries: one row per (event, endpoint), each with its own attempts,
-- retries and status (README.md, "Webhook endpoints"). The relay writes
-- them when it fans an event out, outside the transaction that wrote the
-- event, with INSERT IGNORE on uk_deliveries_pair: fanning an event out
-- twice (a relay that died after its claim, a redelivery) adds nothing
-- twice. endpoint_id is the API endpoint's id, or '' for the merchant's
-- PAYSVC_NOTIFY_ENDPOINTS endpoint. status: 1 pending, 2 delivered,
-- 3 failed (as events.delivery). next_attempt_at, claim, retries and
-- redeliver work as they did on events: next_attempt_at is set only while
-- pending (when the next attempt is due, or when the claim's lease ends),
-- so idx_deliveries_due holds only pending deliveries. id is the relay's
-- handle on a row (one integer in its claims and outcomes).
CREATE TABLE deliveries (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  event_id        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  endpoint_id     VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status          TINYINT UNSIGNED NOT NULL,
  next_attempt_at DATETIME(6) NULL,
  claim           BINARY(16) NULL,
  retries         TINYINT UNSIGNED NOT NULL DEFAULT 0,
  redeliver       TINYINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  UNIQUE KEY uk_deliveries_pair (event_id, endpoint_id),
  KEY idx_deliveries_due (next_attempt_at),
  KEY idx_deliveries_endpoint (endpoint_id, status, event_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
