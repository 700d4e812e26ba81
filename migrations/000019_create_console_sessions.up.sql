-- Sessions of the operator console (README.md, "Operator console"). The
-- browser holds a random token; the table holds only a SHA-256 of it and
-- of the operator key that opened it (internal/console, tokenHash), so a
-- copy of the table opens no session, and a key removed from
-- PAYSVC_ADMIN_KEYS takes its sessions with it. A session ends at expires_at (12 h
-- after sign-in) or when its row is deleted by sign-out;
-- idx_console_sessions_expires lets sign-in remove the ended ones.
CREATE TABLE console_sessions (
  token_hash BINARY(32)  NOT NULL,
  created_at DATETIME(6) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (token_hash),
  KEY idx_console_sessions_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
