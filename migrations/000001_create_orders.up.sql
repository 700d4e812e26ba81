-- Orders: the business row. order_no is the primary key (time-ordered, so
-- inserts append to the clustered index); (merchant_id, merchant_order_no) is
-- the permanent backstop against a merchant creating the same order twice,
-- whatever happens to idempotency records. merchant_order_no is VARBINARY so
-- that it is compared byte for byte: no case folding and no PAD SPACE, on
-- MySQL 8 and MariaDB alike.
CREATE TABLE orders (
  order_no              VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id           VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_order_no     VARBINARY(256) NOT NULL,
  status                VARCHAR(20) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  amount                BIGINT NOT NULL,
  currency              CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  refunded_amount       BIGINT NOT NULL DEFAULT 0,
  pending_refund_amount BIGINT NOT NULL DEFAULT 0,
  description           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  version               BIGINT NOT NULL DEFAULT 1,
  created_at            DATETIME(6) NOT NULL,
  updated_at            DATETIME(6) NOT NULL,
  paid_at               DATETIME(6) NULL,
  PRIMARY KEY (order_no),
  UNIQUE KEY uk_orders_merchant_order (merchant_id, merchant_order_no),
  CONSTRAINT ck_orders_refunds CHECK (refunded_amount >= 0 AND pending_refund_amount >= 0 AND refunded_amount + pending_refund_amount <= amount)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
