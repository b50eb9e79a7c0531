-- The WAL source's hand-over to the table's retry path, in the stream's order. The retry path published a
-- handed-over aggregate's pending rows in `seq` order, which is the order of their inserts: two transactions of
-- the aggregate that committed in the reverse of their inserts were published in the reverse of their commits,
-- and a row that had committed but not yet been streamed could be published before rows the stream had handed
-- over ahead of it. Now the WAL relay numbers each event it leaves in the table (handed over, or passed while its
-- aggregate is handed over; message-mode events too) in the order the stream gave it, from
-- `outbox_wal_hand_over_order`, before the stream is acknowledged past it; the retry path publishes only numbered
-- events, in that order. The table source never reads the column. No index: the retry path finds an aggregate's
-- rows through `outbox_events_partition_seq_idx`, as before.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS handed_over BIGINT;
CREATE SEQUENCE IF NOT EXISTS outbox_wal_hand_over_order;

-- Events handed over by a relay of an earlier version have no number. The first WAL relay of this version to start
-- numbers those of the aggregates on the table's path then (0: in `seq` order, ahead of every numbered event), once,
-- and sets this; a table that never had a WAL slot has nothing to number. Done by the relay rather than here, so
-- that this migration does not read the whole table while it holds the lock its new column takes, and so that it
-- also numbers what an earlier relay left in its last batch.
ALTER TABLE outbox_control ADD COLUMN IF NOT EXISTS wal_hand_over_numbered BOOLEAN NOT NULL DEFAULT true;
UPDATE outbox_control SET wal_hand_over_numbered = false WHERE id AND wal_slot IS NOT NULL;

-- A WAL relay of an earlier version would leave the events it hands over without a number, and the retry path of
-- this version would never publish them: it stops at its next read of streamed rows, with this message, which its
-- relay reports as it stops. The read keeps its plan and grants under a new name.
ALTER FUNCTION outbox_pending_by_id(UUID[]) RENAME TO outbox_wal_pending_by_id;
CREATE FUNCTION outbox_pending_by_id(ids UUID[])
RETURNS TABLE(n BIGINT, id UUID, seq BIGINT, partition SMALLINT, event_type TEXT, aggregate_type TEXT,
              aggregate_id TEXT, schema_version INT4, payload TEXT, headers TEXT, sensitive_paths TEXT,
              created_at TIMESTAMPTZ, attempts INT4, next_attempt_at TIMESTAMPTZ, row_version TEXT)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RAISE EXCEPTION 'this WAL relay is older than the outbox schema (migration 16 numbers the events it hands '
                    'over): run the relay of the version that migrated'
        USING ERRCODE = '42883';
END
$$;

-- A relay role made from migrations/roles before this migration numbers events too.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT USAGE ON SEQUENCE outbox_wal_hand_over_order TO outbox_relay;
        GRANT UPDATE (wal_hand_over_numbered) ON outbox_control TO outbox_relay;
    END IF;
END
$$;
