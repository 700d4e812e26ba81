-- Events (README.md, "Events and notifications"): the transactional
-- outbox. An event row is written in the transaction of the change it
-- reports, so it exists if and only if the change committed. Its delivery to the merchant's endpoint is tracked
-- on the same row, and every attempt is kept in event_attempts.
--
-- This file holds two statements, the only one that does: one migration
-- number was given to the outbox, and the attempts table is useless
-- without the events table. Both are IF NOT EXISTS, so that a file
-- interrupted between them can be forced back and applied again.
--
-- events:
-- id is "evt_" + ULID: unique without coordination, time-ordered, so
-- inserts append to the primary key. data is the event's "data" object as
-- JSON bytes, rendered once, in the transaction, from the rows as they
-- were then (data.order is the order as GET returned it at that moment).
-- delivery: 0 none (the merchant had no endpoint), 1 pending, 2 delivered,
-- 3 failed. next_attempt_at is set only while delivery is pending: it is
-- when the next attempt is due, or, while a relay holds the event (claim
-- set), when that relay's lease ends. idx_events_due therefore holds only
-- pending events, and a relay's claim is a range scan of it. retries counts
-- the retries of PAYSVC_NOTIFY_SCHEDULE used; 255 means none are left (a
-- redelivery asks for one attempt). redeliver marks a redelivery asked for
-- while an attempt was in flight: the relay schedules one more when it
-- finishes. idx_events_merchant serves GET /v1/events (a merchant's events
-- in id order). Purge needs no index of its own: ids are time-ordered, so
-- the expired events are a range of the primary key.
CREATE TABLE IF NOT EXISTS events (
  id              VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  merchant_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type            VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at      DATETIME(6) NOT NULL,
  data            BLOB NOT NULL,
  delivery        TINYINT UNSIGNED NOT NULL,
  next_attempt_at DATETIME(6) NULL,
  claim           BINARY(16) NULL,
  retries         TINYINT UNSIGNED NOT NULL DEFAULT 0,
  redeliver       TINYINT UNSIGNED NOT NULL DEFAULT 0,
  PRIMARY KEY (id),
  KEY idx_events_merchant (merchant_id, id),
  KEY idx_events_due (next_attempt_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- event_attempts: one row per delivery attempt, in attempt order within an
-- event (the primary key (event_id, id) clusters an event's attempts).
-- status_code is NULL when no HTTP answer came (connection refused,
-- timeout); error says what went wrong, empty on success.
CREATE TABLE IF NOT EXISTS event_attempts (
  event_id    VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  at          DATETIME(6) NOT NULL,
  status_code SMALLINT UNSIGNED NULL,
  error       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  duration_ms INT UNSIGNED NOT NULL,
  PRIMARY KEY (event_id, id),
  KEY idx_event_attempts_id (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
