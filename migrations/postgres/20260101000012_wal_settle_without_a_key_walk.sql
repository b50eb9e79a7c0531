-- The WAL relay's settle by position (migration 11), made safe from one more plan. Its first step joined the batch
-- to the rows by position and by id (`=`). With sequential scans off, the plan PostgreSQL keeps for the function's
-- statement, made while the table was empty, walked the whole primary key in `id` order and compared each row with
-- the batch: 1.3 s to settle 100 rows beside 100,000. The id is now compared with `IS NOT DISTINCT FROM` (the same
-- for ids, which are never null), which no index serves and no join sorts or hashes on: the position is the only
-- way left to a row, one fetch each. The relay's table source settles with the same two steps
-- (`located_or_moved` in `outbox-core/src/backend/postgres/settle.rs`).
--
-- `ids` and `versions` (the positions, as text) are the batch's rows; only rows still pending change: marked
-- published, or deleted when `delete_rows`. Returns how many were.
CREATE OR REPLACE FUNCTION outbox_settle_published_at(ids UUID[], versions TEXT[], delete_rows BOOLEAN)
RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
SET enable_seqscan = off
AS $$
DECLARE
    settled BIGINT;
BEGIN
    IF delete_rows THEN
        WITH located AS (
            DELETE FROM outbox_events e
             USING UNNEST(ids, versions::tid[]) AS s(id, version)
             WHERE e.ctid = s.version AND e.id IS NOT DISTINCT FROM s.id AND e.status = 'pending'
            RETURNING e.id
        ),
        moved AS (
            DELETE FROM outbox_events e
             WHERE e.id = ANY(ARRAY(SELECT i.id FROM UNNEST(ids) AS i(id) EXCEPT SELECT l.id FROM located l))
               AND e.status = 'pending'
            RETURNING e.id
        )
        SELECT (SELECT count(*) FROM located) + (SELECT count(*) FROM moved) INTO settled;
    ELSE
        WITH located AS (
            UPDATE outbox_events e SET status = 'published', published_at = now()
              FROM UNNEST(ids, versions::tid[]) AS s(id, version)
             WHERE e.ctid = s.version AND e.id IS NOT DISTINCT FROM s.id AND e.status = 'pending'
            RETURNING e.id
        ),
        moved AS (
            UPDATE outbox_events e SET status = 'published', published_at = now()
             WHERE e.id = ANY(ARRAY(SELECT i.id FROM UNNEST(ids) AS i(id) EXCEPT SELECT l.id FROM located l))
               AND e.status = 'pending'
            RETURNING e.id
        )
        SELECT (SELECT count(*) FROM located) + (SELECT count(*) FROM moved) INTO settled;
    END IF;
    RETURN settled;
END
$$;
