-- Payments: every payment event a provider reported that reached an order,
-- one row per provider transaction. The unique (provider, txn_id) is the
-- permanent backstop: after the callback window has passed and the
-- idempotency record is purged, a redelivered transaction still cannot be
-- applied twice. result says what the event did (applied, ignored,
-- amount_mismatch, duplicate_payment, late_payment); the last two are money
-- received that must be paid back, found by reconcile's report.
CREATE TABLE payments (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  provider   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  txn_id     VARBINARY(64) NOT NULL,
  order_no   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status     VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  result     VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  amount     BIGINT NOT NULL,
  currency   CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_payments_txn (provider, txn_id),
  KEY idx_payments_order (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
