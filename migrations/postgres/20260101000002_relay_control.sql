-- Relay control: one row that every relay reads in its claim statement. `outbox pause` sets `paused`, so a
-- deploy can stop publishing without touching the API or the relays.
CREATE TABLE IF NOT EXISTS outbox_control (
    id         BOOLEAN     PRIMARY KEY DEFAULT true CHECK (id),
    paused     BOOLEAN     NOT NULL DEFAULT false,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO outbox_control (id) VALUES (true) ON CONFLICT (id) DO NOTHING;

-- Retention: finished rows by the time they finished (published) or were created (cancelled), so deleting old
-- rows in small batches reads only what it deletes.
CREATE INDEX IF NOT EXISTS outbox_events_finished_idx
    ON outbox_events ((COALESCE(published_at, created_at)))
    WHERE status IN ('published', 'cancelled');
