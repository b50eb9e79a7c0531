-- Relays v2: partition leases instead of row leases.
--
-- Every event belongs to one of 256 partitions by a hash of its aggregate, computed here (a generated column), so
-- rows that other services insert with plain SQL are placed too; one aggregate stays in one partition forever.
-- Live relays split the partitions (`outbox_partitions`, `outbox_relays`); the owner of a partition reads its
-- pending rows without writing them and settles each batch with one statement fenced by the partition's epoch.
-- An event costs one row version to insert and one to settle; it no longer passes through `in_flight`.

-- The partition of an aggregate: stable across versions, platforms and restarts (PostgreSQL's own text hash).
CREATE OR REPLACE FUNCTION outbox_partition_of(aggregate_type TEXT, aggregate_id TEXT) RETURNS SMALLINT
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (((hashtextextended(aggregate_type || chr(31) || aggregate_id, 0) % 256) + 256) % 256)::smallint $$;

ALTER TABLE outbox_events
    ADD COLUMN IF NOT EXISTS partition SMALLINT
        GENERATED ALWAYS AS (outbox_partition_of(aggregate_type, aggregate_id)) STORED;

-- Rows a relay of the previous design held in flight are pending again: the new relays publish each of them.
UPDATE outbox_events
   SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL
 WHERE status = 'in_flight';

-- Nothing writes `in_flight` any more (a batch in flight is recorded in `outbox_batches`). A relay of the previous
-- design claims by setting it, so its claim fails on this constraint and it publishes nothing beside the new
-- relays; the constraint's name says what to do.
ALTER TABLE outbox_events DROP CONSTRAINT IF EXISTS outbox_events_status_check;
ALTER TABLE outbox_events
    ADD CONSTRAINT outbox_events_status_check_upgrade_relays_to_partition_leases
    CHECK (status IN ('pending', 'published', 'failed', 'cancelled'));

-- Indexes: each one is a write on every enqueue, so only those a statement reads.
-- Dropped: the in-flight index (no row is in flight), the per-aggregate index (ordering is kept by the partition's
-- owner, not by a probe per row) and the old pending index (replaced by the one below).
DROP INDEX IF EXISTS outbox_events_in_flight_idx;
DROP INDEX IF EXISTS outbox_events_aggregate_idx;
DROP INDEX IF EXISTS outbox_events_pending_idx;

-- Read by the relay's batch read (`WHERE partition = $p AND status = 'pending' AND seq > $cursor ORDER BY seq`),
-- by the backlog gauges and by `outbox status`. Partial: its size follows the backlog, not the history.
CREATE INDEX IF NOT EXISTS outbox_events_pending_idx
    ON outbox_events (partition, seq)
    WHERE status = 'pending';
-- Kept: outbox_events_pkey (settle, show, retry and cancel by id), outbox_events_failed_idx (failed heads when a
-- relay takes a partition over, `outbox events list --status failed`, the failed gauges) and
-- outbox_events_finished_idx (retention).

-- The partitions and who publishes each. `epoch` grows at every change of owner: it is the fencing token the
-- settle statement checks (under a key-share lock, so a takeover waits for a settle in progress and a settle after
-- a takeover changes nothing). `generation` grows when an operator changes rows of the partition (retry, cancel),
-- so its owner reads the partition afresh.
CREATE TABLE IF NOT EXISTS outbox_partitions (
    partition  SMALLINT    PRIMARY KEY CHECK (partition >= 0),
    owner      UUID,
    epoch      BIGINT      NOT NULL DEFAULT 0,
    generation BIGINT      NOT NULL DEFAULT 0,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Makes `epoch` a key column: settles take FOR KEY SHARE locks, which only an epoch change waits for.
    UNIQUE (partition, epoch)
);

INSERT INTO outbox_partitions (partition)
SELECT p FROM generate_series(0, 255) AS p
ON CONFLICT (partition) DO NOTHING;

-- Live relays: a relay whose heartbeat is older than its lease is dead; the next heartbeat of another relay
-- removes it, counts an attempt for the events of its batches in flight, and its partitions are taken.
CREATE TABLE IF NOT EXISTS outbox_relays (
    relay_id     UUID        PRIMARY KEY,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    -- Where it runs, for `outbox status` (host name and process id).
    host         TEXT        NOT NULL DEFAULT ''
);

-- The batches being published now: one row per batch, written before the publish and deleted by its settle. A
-- relay that dies leaves its rows here; the relay that removes it counts an attempt for their events, so an event
-- that kills every relay that publishes it reaches `failed` after the configured attempts.
CREATE TABLE IF NOT EXISTS outbox_batches (
    relay_id   UUID        NOT NULL,
    batch_id   UUID        NOT NULL,
    events     UUID[]      NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Adopted from a dead relay by `relay_id`, which counts the attempt of its events and then deletes the row
    -- (if it dies first, the next relay adopts the row in turn: each crash is counted once).
    crashed    BOOLEAN     NOT NULL DEFAULT false,
    PRIMARY KEY (relay_id, batch_id)
);
