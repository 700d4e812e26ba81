-- Carries live records of layout 1 over, so that an upgrade keeps every
-- key's replay and conflict answers for the rest of its window. Responses
-- are stored plain: one length byte, Location, body (encoding 0). Expired
-- records are left behind. Run it with the service stopped: a request
-- answered by an old instance after this copy would not be carried over.
INSERT INTO idempotency_records_v2
  (key_hash, request_hash, status, owner, lease_until, response_status, response_format, response, expires_at)
SELECT LEFT(UNHEX(SHA2(CONCAT(scope, 0x00, idem_key), 256)), 12), LEFT(request_hash, 8), status, owner, lease_until,
       response_status, response_type,
       CASE WHEN status = 2
            THEN CONCAT(CHAR(COALESCE(LENGTH(response_location), 0) USING binary),
                        COALESCE(response_location, ''), COALESCE(response_body, ''))
       END,
       expires_at
  FROM idempotency_records
 WHERE expires_at > UTC_TIMESTAMP(6)
