ALTER TABLE events DROP KEY idx_events_order, DROP COLUMN order_no
