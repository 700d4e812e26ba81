ALTER TABLE orders DROP KEY idx_orders_expiry, DROP COLUMN expires_at;
DROP TABLE IF EXISTS provider_calls;
