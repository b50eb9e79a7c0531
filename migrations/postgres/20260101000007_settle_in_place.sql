-- Settling in place: marking an event published rewrites its row on the same page (a heap-only tuple update, no
-- new index entry), which PostgreSQL does only when no index covers a column the update changes, in its key or in
-- its predicate. A publish changes `status` and `published_at`, so the indexes on `status` go; every index below
-- is on columns a publish never changes. Each one is a write on every enqueue, so only those a statement reads.

-- Room on every page for the settled versions of its rows (new pages only; a page filled before this keeps its
-- rows and moves an updated one to another page, as before).
ALTER TABLE outbox_events SET (fillfactor = 70);

-- Read by the relay's batch read, its replays and rechecks (`partition = $p AND seq > $cursor ORDER BY seq`), by a
-- relay that takes a partition over (from the partition's `start_seq`), and by the backlog gauges, `outbox status`
-- and the WAL source's backlog (each partition from its `start_seq`). Not partial: pending rows and their
-- published history share it, and every read starts at a cursor or a `start_seq`, after the history.
CREATE INDEX IF NOT EXISTS outbox_events_partition_seq_idx ON outbox_events (partition, seq);

-- Rows that failed an attempt (a first publish never changes `attempts`): the failed heads a relay loads when it
-- takes a partition over, the failed gauges and counts, `outbox events retry --all-failed`, and the aggregates the
-- WAL source handed to the table's retry path. A failed row always has an attempt (checked below).
CREATE INDEX IF NOT EXISTS outbox_events_attempted_idx ON outbox_events (partition, seq) WHERE attempts > 0;

-- Retention (rows created before the cutoff) and `outbox status` (events published in the last minute and hour,
-- among those created in the last day): a summary per 128 pages, in creation order like the rows themselves.
CREATE INDEX IF NOT EXISTS outbox_events_created_at_idx ON outbox_events USING brin (created_at);

UPDATE outbox_events SET attempts = 1 WHERE status = 'failed' AND attempts = 0;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = 'outbox_events'::regclass AND conname = 'outbox_events_failed_has_an_attempt') THEN
        ALTER TABLE outbox_events
            ADD CONSTRAINT outbox_events_failed_has_an_attempt CHECK (status <> 'failed' OR attempts > 0);
    END IF;
END
$$;

-- Where a partition's unfinished rows begin: every row of the partition with a lower `seq` is published, cancelled
-- or failed (failed rows are found through the attempted index). Its owner advances it as it publishes (fenced by
-- its epoch and by the generation, which an operator's retry grows while it moves the start back to the retried
-- rows); a relay that takes the partition over reads from here, not from the partition's first row.
ALTER TABLE outbox_partitions ADD COLUMN IF NOT EXISTS start_seq BIGINT NOT NULL DEFAULT 0;

UPDATE outbox_partitions p
   SET start_seq = COALESCE(
           LEAST((SELECT min(e.seq) FROM outbox_events e WHERE e.partition = p.partition AND e.status = 'pending'),
                 (SELECT min(e.seq) FROM outbox_events e WHERE e.partition = p.partition AND e.status = 'failed')),
           (SELECT max(e.seq) + 1 FROM outbox_events e WHERE e.partition = p.partition),
           0);

DROP INDEX IF EXISTS outbox_events_pending_idx;
DROP INDEX IF EXISTS outbox_events_failed_idx;
DROP INDEX IF EXISTS outbox_events_finished_idx;

-- A batch's event ids (16 bytes each, a thousand by default) are random: stored out of line without the
-- compression attempt that would cost every recorded batch and never save a byte.
ALTER TABLE outbox_batches ALTER COLUMN events SET STORAGE EXTERNAL;
