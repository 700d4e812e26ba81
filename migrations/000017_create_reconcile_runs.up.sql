-- Reconcile runs: one row per `paysvc reconcile`, written when it ends,
-- so that the operator console can say when the books were last checked
-- and what that found, without running the checks itself. status is clean,
-- findings or failed (the checks could not run: error in summary).
-- findings, to_refund and returned are the run's counts (README.md,
-- "Commands": the findings, the payments to refund by hand, those the
-- provider returned automatically); summary is the report as JSON: the table counts, the
-- findings and payments to refund (the first 100 of each, with their
-- totals), the error. The newest run is the highest id.
CREATE TABLE reconcile_runs (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  started_at  DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NOT NULL,
  status      VARCHAR(12) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  findings    INT UNSIGNED NOT NULL,
  to_refund   INT UNSIGNED NOT NULL,
  returned    INT UNSIGNED NOT NULL,
  summary     MEDIUMBLOB NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
