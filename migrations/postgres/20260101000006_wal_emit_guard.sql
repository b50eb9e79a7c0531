-- The guard of the table-free enqueue whose events travel with the COMMIT (`Outbox::new().via_wal().begin(..)`):
-- true while the WAL source publishes the table and its replication slot exists, so that the write-ahead log keeps
-- the messages until they are published; otherwise an error (SQLSTATE OXW01) that rolls the whole transaction back,
-- domain change included, since the COMMIT is already on its way in the same message. The emit lock (the caller
-- passes its key, defined once in the crate) is taken shared and never waited for: `outbox wal disable` and
-- `outbox wal drop-slot` hold it while they move the slot's unpublished messages to the table.
CREATE OR REPLACE FUNCTION outbox_wal_emit_guard(emit_lock BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF pg_try_advisory_xact_lock_shared(emit_lock) AND EXISTS (
           SELECT 1 FROM outbox_control c
             JOIN pg_replication_slots s ON s.slot_name = c.wal_slot AND s.database = current_database()
            WHERE c.id AND c.source = 'wal') THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'the WAL source has no slot to keep message-mode events; nothing was committed'
        USING ERRCODE = 'OXW01',
              HINT = 'run `outbox wal enable` and start `outbox relay --source wal` once, or enqueue table rows';
END
$$;
