//! The partition-lease fence of the statements that write for a batch (its record and its settle).

/// `held`: the partitions of `$2` (partitions) at the epochs `$3` that relay `$1` still owns, locked FOR KEY
/// SHARE. A takeover changes the epoch (a key column), so it waits for the statement to commit, and a statement
/// that starts after a takeover finds no lease. Heartbeats do not change the epoch, so they never wait for it.
/// `fence`: what the statement's writes check, computed once: `whole` when every partition is held (the usual
/// case: no row needs a check of its own), otherwise the `partitions` held.
///
/// Each partition's epoch is found by its position in `$3`, not by a join of the arrays with the table (such a
/// join, planned for ten rows, became a nested loop over both). The table holds 256 rows: a plan made for the call
/// finds the partitions through the key's index, and the generic plan that the prepared statement settles on scans
/// the table's few pages (`EXPLAIN` with `plan_cache_mode = force_generic_plan`); either is cheap.
///
/// A literal argument adds a condition on each partition row `p`: under `FOR KEY SHARE`, PostgreSQL checks it
/// again on the row's latest version when the lock had to wait for another transaction to change the row.
macro_rules! held_leases {
    () => {
        held_leases!("")
    };
    ($also:literal) => {
        concat!(
            "WITH held AS (
SELECT p.partition FROM outbox_partitions p
 WHERE p.partition = ANY($2::int2[]) AND p.owner = $1
   AND p.epoch = ($3::int8[])[array_position($2::int2[], p.partition)]",
            $also,
            "
   FOR KEY SHARE OF p
),
fence AS (
SELECT COALESCE(array_agg(partition), '{}') AS partitions, count(*) = cardinality($2::int2[]) AS whole FROM held
)"
        )
    };
}

/// The condition that row `e` is in a partition the statement holds (see [`held_leases`]).
macro_rules! in_held_partition {
    () => {
        "((SELECT whole FROM fence) OR e.partition = ANY((SELECT partitions FROM fence)::int2[]))"
    };
}
pub(super) use held_leases;
pub(super) use in_held_partition;

/// The leases as the fence binds them: the partitions (`$2`) and their epochs (`$3`).
pub(super) fn lease_arrays(leases: &[(u16, i64)]) -> (Vec<i16>, Vec<i64>) {
    leases.iter().map(|&(partition, epoch)| (i16::try_from(partition).unwrap_or(i16::MAX), epoch)).unzip()
}
