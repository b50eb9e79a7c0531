-- Relays v2 on SQLite: the same tables as on PostgreSQL, with one partition (one relay per database file
-- publishes; SQLite has a single writer anyway). Every event is in partition 0.

-- Rows a relay of the previous design held in flight are pending again: the new relay publishes each of them.
UPDATE outbox_events
   SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL
 WHERE status = 'in_flight';

-- Nothing writes `in_flight` any more; a relay of the previous design claims by setting it and is stopped here.
CREATE TRIGGER IF NOT EXISTS outbox_events_no_in_flight
BEFORE UPDATE OF status ON outbox_events
WHEN NEW.status = 'in_flight'
BEGIN
    SELECT RAISE(ABORT, 'this outbox is published by partition-lease relays: upgrade this relay');
END;

-- Indexes: only those a statement reads. The relay reads pending rows by seq.
DROP INDEX IF EXISTS outbox_events_in_flight_idx;
DROP INDEX IF EXISTS outbox_events_aggregate_idx;
DROP INDEX IF EXISTS outbox_events_pending_idx;
CREATE INDEX IF NOT EXISTS outbox_events_pending_idx ON outbox_events (seq) WHERE status = 'pending';

CREATE TABLE IF NOT EXISTS outbox_partitions (
    partition  INTEGER PRIMARY KEY CHECK (partition >= 0),
    owner      TEXT,
    epoch      INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0,
    changed_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

INSERT INTO outbox_partitions (partition) VALUES (0) ON CONFLICT (partition) DO NOTHING;

CREATE TABLE IF NOT EXISTS outbox_relays (
    relay_id     TEXT PRIMARY KEY,
    started_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    heartbeat_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    expires_at   TEXT NOT NULL,
    host         TEXT NOT NULL DEFAULT ''
);

-- `events`: a JSON array of event ids.
CREATE TABLE IF NOT EXISTS outbox_batches (
    relay_id   TEXT NOT NULL,
    batch_id   TEXT NOT NULL,
    events     TEXT NOT NULL CHECK (json_valid(events)),
    started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (relay_id, batch_id)
);
