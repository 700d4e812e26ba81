ALTER TABLE event_attempts DROP COLUMN endpoint_id
