-- The outbox table on SQLite: the same columns as on PostgreSQL. Timestamps are UTC text in one fixed format
-- ('YYYY-MM-DDTHH:MM:SS.SSSZ'), so comparing them as text compares them in time; ids are hyphenated UUID text;
-- JSON columns are text checked with json_valid.
CREATE TABLE IF NOT EXISTS outbox_events (
    -- Insertion order; the relay publishes the events of one aggregate in this order.
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT    NOT NULL UNIQUE,
    aggregate_type   TEXT    NOT NULL,
    aggregate_id     TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,
    schema_version   INTEGER NOT NULL DEFAULT 1 CHECK (schema_version >= 1),
    payload          TEXT    NOT NULL CHECK (json_valid(payload)),
    headers          TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
    sensitive_paths  TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(sensitive_paths)),
    status           TEXT    NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'in_flight', 'published', 'failed', 'cancelled')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    created_at       TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    published_at     TEXT,
    last_error       TEXT,
    lease_owner      TEXT,
    lease_expires_at TEXT,
    lease_epoch      INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX IF NOT EXISTS outbox_events_pending_idx
    ON outbox_events (next_attempt_at, seq)
    WHERE status = 'pending';

CREATE INDEX IF NOT EXISTS outbox_events_in_flight_idx
    ON outbox_events (lease_expires_at)
    WHERE status = 'in_flight';

CREATE INDEX IF NOT EXISTS outbox_events_aggregate_idx
    ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE status IN ('pending', 'in_flight', 'failed');

CREATE INDEX IF NOT EXISTS outbox_events_failed_idx
    ON outbox_events (event_type, created_at)
    WHERE status = 'failed';

CREATE TABLE IF NOT EXISTS outbox_inbox (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    processed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX IF NOT EXISTS outbox_inbox_processed_at_idx ON outbox_inbox (processed_at);
