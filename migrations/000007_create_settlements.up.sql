-- Daily settlements (README.md, "Daily settlement"): per merchant, UTC day
-- and currency, what the ledger booked that day — applied payments and
-- settled refunds, counts and sums — and the net. Written by `paysvc settle --date D`.
--
-- The primary key (merchant_id, settle_date, currency) is the job's
-- backstop: however often and however concurrently the job runs, a row is
-- written once. A merchant's rows for a day are written in one transaction,
-- so they are also the job's checkpoint: a merchant that has rows for D is
-- done for D, and a run that was killed halfway resumes with the merchants
-- that have none. (One table, one statement: the checkpoint cannot drift
-- from the rows it vouches for.)
CREATE TABLE settlements (
  merchant_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  settle_date     DATE NOT NULL,
  currency        CHAR(3) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  payments_count  BIGINT NOT NULL,
  payments_amount BIGINT NOT NULL,
  refunds_count   BIGINT NOT NULL,
  refunds_amount  BIGINT NOT NULL,
  net             BIGINT NOT NULL,
  created_at      DATETIME(6) NOT NULL,
  PRIMARY KEY (merchant_id, settle_date, currency),
  KEY idx_settlements_date (settle_date)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
