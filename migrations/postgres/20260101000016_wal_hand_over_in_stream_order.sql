-- The WAL source's hand-over to the table's retry path, in the stream's order. The retry path published a
-- handed-over aggregate's pending rows in `seq` order, which is the order of their inserts: two transactions of
-- the aggregate that committed in the reverse of their inserts were published in the reverse of their commits,
-- and a row that had committed but not yet been streamed could be published before rows the stream had handed
-- over ahead of it. Now the WAL relay numbers each row it hands over (or passes while its aggregate is handed
-- over) in the order the stream gave it, from `outbox_wal_hand_over_order`, before the stream is acknowledged past
-- it; the retry path publishes only numbered rows, in that order. The table source never reads the column.
-- No index: the retry path finds an aggregate's rows through `outbox_events_partition_seq_idx`, as before.
ALTER TABLE outbox_events ADD COLUMN IF NOT EXISTS handed_over BIGINT;
CREATE SEQUENCE IF NOT EXISTS outbox_wal_hand_over_order;

-- Rows handed over by a relay of an earlier version keep their `seq` order, ahead of those numbered from now on.
UPDATE outbox_events e SET handed_over = 0
  FROM (SELECT aggregate_type, aggregate_id FROM outbox_wal_handed_over
        UNION
        SELECT aggregate_type, aggregate_id FROM outbox_events
         WHERE attempts > 0 AND status IN ('pending', 'failed')) h
 WHERE e.aggregate_type = h.aggregate_type AND e.aggregate_id = h.aggregate_id
   AND e.status IN ('pending', 'failed') AND e.handed_over IS NULL
   AND (SELECT source = 'wal' OR wal_slot IS NOT NULL FROM outbox_control WHERE id);

-- A relay role made from migrations/roles before this migration numbers rows too.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT USAGE ON SEQUENCE outbox_wal_hand_over_order TO outbox_relay;
    END IF;
END
$$;
