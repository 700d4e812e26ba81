ALTER TABLE payments DROP KEY idx_payments_result;

DROP TABLE IF EXISTS console_sessions
