-- A cheaper guard for message-mode producers. Migration 6's guard read the control row and `pg_replication_slots`
-- at every commit, which cost the database about as much as the message itself (each lookup pays for its locks,
-- its plan's check and an executor in every transaction). A session now reads them at most about once a second:
-- a check that found the slot is remembered until a second after the start of the transaction that made it. The
-- emit lock is still taken at every commit.
--
-- What stays exact: `outbox wal disable` and `outbox wal drop-slot` first mark the control row as closing
-- (`wal_closing_at`) while holding the close lock (the emit lock's key plus one) for their whole run, so that no
-- check passes; then they wait until every remembered check has expired, and only then take the emit lock, move
-- the slot's unpublished messages to the table and drop it. A mark whose command died (its session's lock gone)
-- closes nothing. A slot dropped by hand, bypassing them, loses the messages of sessions whose check is less than
-- a second old: drop it with `outbox wal drop-slot`.

-- When a drop of the slot began to close it to producers.
ALTER TABLE outbox_control ADD COLUMN IF NOT EXISTS wal_closing_at TIMESTAMPTZ;

-- How long a session remembers a check that found the slot, from the start of the transaction that made it: that
-- transaction's snapshots are no older (in any isolation level), so a check that missed a closing mark expires at
-- most this long after the mark was committed. A drop of the slot waits this long after its mark.
CREATE OR REPLACE FUNCTION outbox_wal_check_lifetime() RETURNS INTERVAL
LANGUAGE sql IMMUTABLE AS $$ SELECT interval '1 second' $$;

-- True while message-mode events may be written: the emit lock taken shared (never waited for: a drop of the slot
-- holds it), and the WAL source's recorded slot found in this database with no drop closing it, by this session
-- within the check's lifetime or now. False otherwise; writes nothing.
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
                WHERE c.id AND c.source = 'wal'
                  AND (c.wal_closing_at IS NULL OR pg_try_advisory_xact_lock_shared(emit_lock + 1))) THEN
        -- Session-wide, and undone with this transaction if it rolls back.
        PERFORM set_config('outbox.wal_slot_checked_at', date_part('epoch', transaction_timestamp())::text, false);
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- Migration 6's guard on the cheaper check: true, or the error that rolls the whole transaction back.
CREATE OR REPLACE FUNCTION outbox_wal_emit_guard(emit_lock BIGINT) RETURNS BOOLEAN
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF outbox_wal_slot_ready(emit_lock) THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'the WAL source has no slot to keep message-mode events; nothing was committed'
        USING ERRCODE = 'OXW01',
              HINT = 'run `outbox wal enable` and start `outbox relay --source wal` once, or enqueue table rows';
END
$$;
