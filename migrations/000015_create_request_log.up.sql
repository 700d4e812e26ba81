-- The request log: one row per request the idempotency engine answered
-- (merchant requests, provider callbacks over HTTP and JetStream, the
-- sweep's recoveries), with how it was answered. It is written after the
-- answer, off the request path, by a writer that batches rows
-- (internal/requestlog): a row can be lost (a full queue, a crash), never
-- the request. Nothing reads it to decide anything; it is what an operator
-- reads of an order's history and of today's traffic.
--
-- kind names the entry (order_create, order_cancel, refund_create, …,
-- callback, jetstream_callback, sweep_callback); outcome is ran,
-- replayed, in_flight (409), conflict (422: the key reused with another
-- request), refused (another answer below 500) or error (500 and more).
-- idem_key is the merchant's Idempotency-Key or a callback's derived key
-- ({provider}:{type}:{txn_id}); order_no is '' when the request named
-- none. result is a callback's result (applied, duplicate_payment, …) or
-- the problem code of an answer that is not a stored response.
-- fingerprint is the first 8 bytes of the request's fingerprint, the part
-- its idempotency record keeps. Sender-chosen values (key, order_no) are
-- bytes: no charset can refuse them and fail the batch.
--
-- idx_request_log_order serves an order's rows in order; idx_request_log_at
-- holds what the counts of a time range group by, so they read that
-- index's range alone; purge reads its oldest entries.
CREATE TABLE request_log (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at          DATETIME(6) NOT NULL,
  kind        VARCHAR(24) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  provider    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  order_no    VARBINARY(64) NOT NULL DEFAULT '',
  idem_key    VARBINARY(320) NOT NULL,
  outcome     VARCHAR(12) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status      SMALLINT UNSIGNED NOT NULL,
  result      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  fingerprint BINARY(8) NOT NULL,
  PRIMARY KEY (id),
  KEY idx_request_log_order (order_no, id),
  KEY idx_request_log_at (at, kind, outcome, result)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
