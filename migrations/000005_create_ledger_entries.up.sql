-- The ledger: one entry per provider transaction that moved an order's
-- money (an applied payment, a settled refund), written in the same
-- transaction as the order change. Unique (provider, kind, txn_id): a
-- transaction can never be booked twice. reconcile checks that the entries
-- of each order add up to what the order says.
CREATE TABLE ledger_entries (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  provider   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  txn_id     VARBINARY(64) NOT NULL,
  order_no   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  amount     BIGINT NOT NULL,
  currency   CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_ledger_txn (provider, kind, txn_id),
  KEY idx_ledger_order (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
