-- An attempt belongs to one delivery: the event's, to one endpoint ('' is
-- the PAYSVC_NOTIFY_ENDPOINTS endpoint, and every attempt made before
-- endpoints were managed by the API).
ALTER TABLE event_attempts ADD COLUMN endpoint_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''
