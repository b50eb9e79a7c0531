-- The WAL relay's read of streamed rows, by primary key whatever the table's statistics say. The relay prepares
-- the read once per connection, and PostgreSQL keeps the plan it makes after a few calls until the table's
-- statistics change (an `ANALYZE`, a `VACUUM`). Made while the table is empty or a few pages long (a new table,
-- or one that `--retention 0s` keeps short), that plan scans the whole table for each id, and keeps doing so as
-- the table grows, until the next analyze: on a new table, reads 1,000 events/s behind cost 222 buffer accesses
-- each and the 99th percentile of commit-to-publish latency rose to 12-30 ms. Planned in this function, with
-- sequential scans off, the read looks each id up in the primary key at any table size.
--
-- `ids`: the streamed ids, each returned with its index in the array (`n`, from 1) when its row is still
-- pending. The columns are those the relay decodes; `row_version` is where the row was found, for the settle.
CREATE OR REPLACE FUNCTION outbox_pending_by_id(ids UUID[])
RETURNS TABLE(n BIGINT, id UUID, seq BIGINT, partition SMALLINT, event_type TEXT, aggregate_type TEXT,
              aggregate_id TEXT, schema_version INT4, payload TEXT, headers TEXT, sensitive_paths TEXT,
              created_at TIMESTAMPTZ, attempts INT4, next_attempt_at TIMESTAMPTZ, row_version TEXT)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT i.n, e.id, e.seq, e.partition, e.event_type, e.aggregate_type, e.aggregate_id, e.schema_version,
           e.payload::text, e.headers::text, e.sensitive_paths::text, e.created_at, e.attempts, e.next_attempt_at,
           e.ctid::text
      FROM UNNEST(ids) WITH ORDINALITY AS i(id, n)
      -- One lookup per id: a lateral subquery, which no plan joins to a scan of the whole table.
      JOIN LATERAL (SELECT e.*, e.ctid FROM outbox_events e WHERE e.id = i.id AND e.status = 'pending' LIMIT 1) e
        ON true;
END
$$;
