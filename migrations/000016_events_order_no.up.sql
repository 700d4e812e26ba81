-- An event's order, written with the event (internal/events, Recorder):
-- the operator console reads an order's events through
-- idx_events_order instead of scanning data. '' for an event of no order
-- (endpoint.disabled). Events written before this column existed keep '':
-- filling them would rewrite every row of the table in one statement,
-- and they leave with their retention anyway.
ALTER TABLE events
  ADD COLUMN order_no VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
  ADD KEY idx_events_order (order_no, id)
