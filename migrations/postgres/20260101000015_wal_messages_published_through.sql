-- How far the WAL relay's message-mode events are published: the end of the last transaction whose messages a
-- settle recorded as published. PostgreSQL 14 to 16 write a slot's confirmed position to disk only now and then
-- (not at a shutdown checkpoint), so after a server restart the stream can resume behind what was published;
-- rows are then found settled by id, but messages have no row: the relay skips those of transactions that end at
-- or before this position. Written by the settle of each batch that carries messages (one write per batch).
ALTER TABLE outbox_control ADD COLUMN IF NOT EXISTS wal_published_through pg_lsn;

-- A relay role made from migrations/roles before this migration records it too.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        GRANT UPDATE (wal_published_through) ON outbox_control TO outbox_relay;
    END IF;
END
$$;
