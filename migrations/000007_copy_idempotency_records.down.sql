-- Layout 2 keeps only a hash of each key, so its records cannot be copied
-- back: going down to layout 1 forgets the keys (the business tables'
-- unique keys and the state machine still keep each effect single).
DELETE FROM idempotency_records_v2
