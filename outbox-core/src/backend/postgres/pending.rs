//! The pending rows of every partition, for the statements that count or list them (the backlog gauges, `outbox
//! status`, the WAL source's backlog).

/// `pending`: the pending rows (`partition`, `id`, `seq`, `event_type`, `created_at`) by one of two plans, chosen
/// once per statement from the table's statistics:
///
/// - While pending rows are a small share of the table (the usual case: a backlog beside a long published
///   history), partition by partition from its `start_seq` through `outbox_events_partition_seq_idx`: every row
///   below a partition's start is published, cancelled or failed, so the cost follows the backlog and the rows
///   published since the start last moved (about a second's), never the history.
/// - While they are a large share (a backlog that is most of the table, as after an outage, or a table that keeps
///   no history), one sequential scan: it reads the pages in order rather than each pending row's page by index,
///   several times cheaper per row.
macro_rules! pending_rows {
    () => {
        "pending_share AS (
SELECT COALESCE((SELECT s.most_common_freqs[array_position(s.most_common_vals::text::text[], 'pending')]
                   FROM pg_stats s
                  WHERE s.schemaname = current_schema() AND s.tablename = 'outbox_events' AND s.attname = 'status'),
                0) AS share
),
pending AS (
SELECT e.partition, e.id, e.seq, e.event_type, e.created_at
  FROM outbox_partitions p
 CROSS JOIN LATERAL (SELECT x.partition, x.id, x.seq, x.event_type, x.created_at FROM outbox_events x
                      WHERE x.partition = p.partition AND x.seq >= p.start_seq AND x.status = 'pending'
                      -- Kept apart (not flattened into a join): one index range per partition, whatever the
                      -- statistics say of how few rows are pending.
                      OFFSET 0) e
 WHERE (SELECT share FROM pending_share) < 0.25
UNION ALL
SELECT x.partition, x.id, x.seq, x.event_type, x.created_at FROM outbox_events x
 WHERE x.status = 'pending' AND (SELECT share FROM pending_share) >= 0.25
)"
    };
}
pub(super) use pending_rows;
