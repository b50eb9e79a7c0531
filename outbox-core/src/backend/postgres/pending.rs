//! The pending rows of every partition, for the statements that count or list them (the backlog gauges, `outbox
//! status`, the WAL source's backlog).

/// `pending`: the pending rows (every column of `outbox_events`), partition by partition from its `start_seq` through
/// `outbox_events_partition_seq_idx`: every row below a partition's start is published or cancelled, so the cost
/// follows the backlog and the rows published since the start last moved (about a second's), never the history.
macro_rules! pending_rows {
    () => {
        "pending AS (
SELECT e.*
  FROM outbox_partitions p
 CROSS JOIN LATERAL (SELECT * FROM outbox_events x
                      WHERE x.partition = p.partition AND x.seq >= p.start_seq AND x.status = 'pending'
                      -- Kept apart (not flattened into a join): one index range per partition, whatever the
                      -- statistics say of how few rows are pending.
                      OFFSET 0) e
)"
    };
}
pub(super) use pending_rows;
