-- Refunds a merchant asked for. A PENDING refund reserves its amount on the
-- order (orders.pending_refund_amount); the provider's refund.succeeded or
-- refund.failed settles or releases it. provider and txn_id are set when it
-- settles; unique (provider, txn_id) keeps one provider refund transaction
-- from settling two refunds. Unique (merchant_id, merchant_refund_no) is the
-- permanent backstop against a merchant refunding twice, as
-- uk_orders_merchant_order is for orders: it outlives the idempotency
-- window. merchant_refund_no is VARBINARY, compared byte for byte like
-- orders.merchant_order_no.
-- status MISMATCHED: the provider's refund callback reported another amount
-- or currency than the refund asked; reported_status (SUCCEEDED or FAILED),
-- reported_amount and reported_currency keep what it said, provider and
-- txn_id its transaction. Such a refund keeps its reservation until a
-- person settles it with the provider; reconcile reports it.
CREATE TABLE refunds (
  refund_no  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  order_no   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_refund_no VARBINARY(256) NOT NULL,
  amount     BIGINT NOT NULL,
  reason     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  status     VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  provider   VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
  txn_id     VARBINARY(64) NULL,
  reported_status   VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  reported_amount   BIGINT NULL,
  reported_currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NULL,
  created_at DATETIME(6) NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (refund_no),
  KEY idx_refunds_order (order_no),
  UNIQUE KEY uk_refunds_merchant_refund (merchant_id, merchant_refund_no),
  UNIQUE KEY uk_refunds_txn (provider, txn_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
