-- Relay control: one row that every claim reads. `outbox pause` sets `paused`.
CREATE TABLE IF NOT EXISTS outbox_control (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    paused     INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    changed_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

INSERT INTO outbox_control (id) VALUES (1) ON CONFLICT (id) DO NOTHING;

-- Retention: finished rows by the time they finished (published) or were created (cancelled).
CREATE INDEX IF NOT EXISTS outbox_events_finished_idx
    ON outbox_events (COALESCE(published_at, created_at))
    WHERE status IN ('published', 'cancelled');
