-- The message-mode producers' slot check (migration 8), exact at every isolation level and while a slot is made.
--
-- A check that found the slot took the close lock only when the control row showed a drop's closing mark. A
-- REPEATABLE READ or SERIALIZABLE transaction reads the control row at its snapshot, which may predate the mark:
-- such a transaction checking between a drop's move of the slot's messages to the table and the drop itself
-- passed, and its message was dropped with the slot. The close lock, which a drop holds from before its mark to its
-- end and which no snapshot hides, is now tried at every check that reads the slot (shared, never waited for).
--
-- A slot being created (CREATE_REPLICATION_SLOT waits for the transactions running then to end) is listed in
-- pg_replication_slots before it decodes anything, and messages committed meanwhile are never streamed. When the
-- relay makes the recorded slot again (it was dropped by hand, or lost with a failover), the check passed during
-- that wait. A slot now counts once it has a confirmed position, which its creation sets when it is done.
CREATE OR REPLACE FUNCTION outbox_wal_slot_ready(emit_lock BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    -- NULL when this session has not found the slot yet.
    checked_at FLOAT8 := NULLIF(current_setting('outbox.wal_slot_checked_at', true), '')::float8;
    now_epoch FLOAT8 := date_part('epoch', clock_timestamp());
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(emit_lock) THEN
        RETURN false;
    END IF;
    -- A clock set back makes the check expire rather than last longer.
    IF checked_at <= now_epoch AND now_epoch < checked_at + date_part('epoch', outbox_wal_check_lifetime()) THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM outbox_control c
                 JOIN pg_replication_slots s ON s.slot_name = c.wal_slot AND s.database = current_database()
                WHERE c.id AND c.source = 'wal' AND s.confirmed_flush_lsn IS NOT NULL
                  AND pg_try_advisory_xact_lock_shared(emit_lock + 1)) THEN
        -- Session-wide, and undone with this transaction if it rolls back.
        PERFORM set_config('outbox.wal_slot_checked_at', date_part('epoch', transaction_timestamp())::text, false);
        RETURN true;
    END IF;
    RETURN false;
END
$$;
