DROP TABLE IF EXISTS webhook_endpoints
