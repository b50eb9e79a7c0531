-- The write-ahead-log source (`outbox relay --source wal`).
--
-- `source` says which relays publish the table: `table` (the default: relays that read the rows) or `wal` (one
-- relay that streams the inserts through logical replication). Relays of the other source refuse to start, and
-- `outbox wal enable` / `outbox wal disable` switch between them. `wal_slot` is the replication slot the WAL relay
-- created; `wal_backlog_through` is the highest `seq` that was pending when it was created, until those rows are
-- published (a relay that restarts before then publishes them first).
ALTER TABLE outbox_control
    ADD COLUMN IF NOT EXISTS source TEXT NOT NULL DEFAULT 'table' CHECK (source IN ('table', 'wal')),
    ADD COLUMN IF NOT EXISTS wal_slot TEXT,
    ADD COLUMN IF NOT EXISTS wal_backlog_through BIGINT;

-- The publication the WAL relay streams: inserts into the outbox table only, and (PostgreSQL 15 and later) only
-- their `id`, so the stream carries no payload. Creating a publication needs the CREATE privilege on the
-- database; without it the migration goes on, and `outbox relay --source wal` says what to run.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'outbox_wal') THEN
        IF current_setting('server_version_num')::int >= 150000 THEN
            EXECUTE 'CREATE PUBLICATION outbox_wal FOR TABLE outbox_events (id) WITH (publish = ''insert'')';
        ELSE
            EXECUTE 'CREATE PUBLICATION outbox_wal FOR TABLE outbox_events WITH (publish = ''insert'')';
        END IF;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'publication outbox_wal not created (%): the WAL source needs it', SQLERRM;
END
$$;
