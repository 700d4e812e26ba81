-- Merchants: who may call the merchant API. merchant_id is the string every
-- other table already stores (orders.merchant_id and the rest keep it as a
-- plain column, with no foreign key: their rows predate this table, and
-- the merchants of PAYSVC_API_KEYS are written here at start). name is the
-- operator's label, free text. Written by `paysvc merchants create`.
CREATE TABLE merchants (
  merchant_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  name        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (merchant_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
