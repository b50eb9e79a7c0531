//! The partition-lease fence of the statements that write for a batch (its record and its settle).

/// `held`: the partitions of `$2` (partitions) at the epochs `$3` that relay `$1` still owns, locked FOR KEY
/// SHARE. A takeover changes the epoch (a key column), so it waits for the statement to commit, and a statement
/// that starts after a takeover finds no lease. Heartbeats do not change the epoch, so they never wait for it.
macro_rules! held_leases {
    () => {
        "WITH held AS (
SELECT p.partition FROM outbox_partitions p
  JOIN UNNEST($2::int2[], $3::int8[]) AS h(partition, epoch) ON p.partition = h.partition AND p.epoch = h.epoch
 WHERE p.owner = $1
   FOR KEY SHARE OF p
)"
    };
}
pub(super) use held_leases;

/// The leases as the fence binds them: the partitions (`$2`) and their epochs (`$3`).
pub(super) fn lease_arrays(leases: &[(u16, i64)]) -> (Vec<i16>, Vec<i64>) {
    leases.iter().map(|&(partition, epoch)| (i16::try_from(partition).unwrap_or(i16::MAX), epoch)).unzip()
}
