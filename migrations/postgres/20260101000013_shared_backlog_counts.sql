-- The backlog gauges' counts, shared by the relays of a database. Every relay reports the same backlog (dashboards
-- take `max` across relays), and counting a large one costs the database time: 0.9 s for 1,000,000 pending rows,
-- which each of N relays paid at its start and at every refresh. Now the relay whose refresh is due first claims
-- the count (`claimed_at`, one statement: one relay wins), counts, and writes the result here; until the result is
-- older than the refresh interval, every relay reads it instead of counting.
CREATE TABLE IF NOT EXISTS outbox_backlog_counts (
    id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
    -- When the counts were taken, and how long counting took (every relay spaces its refreshes by it).
    counted_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    took_secs FLOAT8 NOT NULL DEFAULT 0,
    -- When a relay last claimed a count: another claims one only when this is as old as the counts may be, so a
    -- relay that died while counting holds nobody back for longer.
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity',
    -- One object per kind and event type: {"kind": "pending" or "failed", "event_type", "n", and for pending rows
    -- "oldest_secs", the age of the oldest at `counted_at`}.
    counts JSONB NOT NULL DEFAULT '[]'
);
INSERT INTO outbox_backlog_counts (id) VALUES (true) ON CONFLICT (id) DO NOTHING;
