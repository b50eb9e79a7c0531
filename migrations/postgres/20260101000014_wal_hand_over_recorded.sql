-- The WAL source's hand-over to the table's retry path, recorded. An aggregate whose event kept failing (or failed
-- for good) leaves the stream: its events are published from the table, in order, until none is left there. A
-- relay rebuilt this from the events with a failed attempt, which misses an aggregate whose head an operator
-- retried (attempts back to 0) while no relay ran, or whose failing head was published before a restart: its other
-- events, already passed by the stream, then stayed pending for good. The relay now records each aggregate it hands
-- over (before the stream is acknowledged past its events) and removes it once the table holds none of its events.
-- Read by the WAL relay when its session starts (the whole table: one row per aggregate handed over).
CREATE TABLE IF NOT EXISTS outbox_wal_handed_over (
    aggregate_type TEXT     NOT NULL,
    aggregate_id   TEXT     NOT NULL,
    partition      SMALLINT NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
