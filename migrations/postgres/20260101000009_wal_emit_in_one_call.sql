-- The message mode's commit in one call per transaction. `OutboxTransaction` sent migration 8's guard as a statement
-- of its own, then one `pg_logical_emit_message` per event: the guard's statement and its two nested PL/pgSQL calls
-- cost the database more than the message itself. `outbox_wal_emit` writes the first message after the same check,
-- in one statement and one PL/pgSQL call, with the common case (a check this session remembers) inline.
--
-- Nothing changes in what is exact: the emit lock is taken shared before the message, in the same transaction, and
-- a check that is not remembered, or fails, goes through `outbox_wal_emit_guard`, which raises OXW01 and so rolls
-- the whole transaction back, messages included.

-- Writes `content` as a transactional logical decoding message with `prefix` once message-mode events may be written
-- (`outbox_wal_slot_ready`), and returns its position; raises OXW01 otherwise.
CREATE OR REPLACE FUNCTION outbox_wal_emit(emit_lock BIGINT, prefix TEXT, content TEXT) RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- `outbox_wal_slot_ready`'s remembered check, inline: calling it would cost as much as the rest of this call.
    -- A NULL (this session has not found the slot yet) goes to the full check, as a clock set back does.
    IF NOT COALESCE(pg_try_advisory_xact_lock_shared(emit_lock)
                    AND floor((date_part('epoch', clock_timestamp())
                               - NULLIF(current_setting('outbox.wal_slot_checked_at', true), '')::float8)
                              / date_part('epoch', outbox_wal_check_lifetime())) = 0, false) THEN
        PERFORM outbox_wal_emit_guard(emit_lock);
    END IF;
    RETURN pg_logical_emit_message(true, prefix, content);
END
$$;
