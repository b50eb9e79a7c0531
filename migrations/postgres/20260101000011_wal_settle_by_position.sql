-- The WAL relay's settle of a batch whose every event was published, by the rows' positions (where the read found
-- them) at any table size. Like the read (migration 10), the relay prepares it once per connection, and the plan
-- PostgreSQL keeps, made while the table was empty or a few pages long, joined the batch to a scan of the whole
-- table and scanned it again for the rows that had moved, at every settle, until the next `ANALYZE`. Planned in
-- this function, with sequential scans off, each row is fetched by its position, or by primary key if it moved.
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
             WHERE e.ctid = s.version AND e.id = s.id AND e.status = 'pending'
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
             WHERE e.ctid = s.version AND e.id = s.id AND e.status = 'pending'
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
