-- Calls to providers (README.md, "Calls to providers"): a refund asked of
-- the provider is a row here, written in the transaction that decides it
-- (a merchant's refund), and attempted by a relay outside any transaction,
-- at least once, with backoff — the events' outbox pointed at the provider.
--
-- (provider, idem_key) is unique: the Idempotency-Key sent with every
-- attempt is the row's, so however often the row is attempted the
-- provider sees one key, and a second decision of the same refund cannot
-- write a second row.
-- kind: 0 a merchant's refund (key = refund_no), 1 an automatic refund of a
-- payment no order keeps (key = auto:{provider}:{txn_id}; refund_no is our
-- reference, and no refunds row exists: the order's amounts never change).
-- status: 0 pending, 1 done (the provider accepted it), 2 failed (refused
-- for good, or the schedule ran out).
-- settled, settled_txn_id: an automatic refund's outcome as the provider's
-- refund callback reported it (SUCCEEDED or FAILED), or MISMATCHED when the
-- callback reported another amount or currency than the call asked:
-- reported_status, reported_amount and reported_currency keep what it said
-- (reconcile reports it).
CREATE TABLE IF NOT EXISTS provider_calls (
  id              VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  provider        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idem_key        VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  refund_no       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  order_no        VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  kind            TINYINT UNSIGNED NOT NULL DEFAULT 0,
  payment_txn_id  VARBINARY(64) NOT NULL,
  amount          BIGINT NOT NULL,
  currency        CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status          TINYINT UNSIGNED NOT NULL DEFAULT 0,
  retries         TINYINT UNSIGNED NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(6) NULL,
  claim           BINARY(16) NULL,
  provider_ref    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  settled         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  settled_txn_id  VARBINARY(64) NULL,
  reported_status   VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
  reported_amount   BIGINT NULL,
  reported_currency CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NULL,
  last_error      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  created_at      DATETIME(6) NOT NULL,
  updated_at      DATETIME(6) NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_provider_calls_key (provider, idem_key),
  KEY idx_provider_calls_refund (refund_no),
  KEY idx_provider_calls_payment (provider, payment_txn_id),
  KEY idx_provider_calls_due (next_attempt_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- Order expiry (the sweep of README.md, "Calls to providers"): NULL when
-- PAYSVC_ORDER_TTL=0 at creation.
-- One ALTER, so that it happens whole or not at all; it comes last, and
-- the CREATE above is IF NOT EXISTS, so an interrupted run can be redone.
ALTER TABLE orders ADD COLUMN expires_at DATETIME(6) NULL, ADD KEY idx_orders_expiry (status, expires_at);
