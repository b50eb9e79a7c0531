//! The partition-lease fence of the statements that write for a batch (its record and its settle).

/// `held`: the partitions of `$2` (partitions) at the epochs `$3` (by partition: see [`lease_arrays`]) that relay
/// `$1` still owns, locked FOR KEY SHARE. A takeover changes the epoch (a key column), so it waits for the
/// statement to commit, and a statement that starts after a takeover finds no lease. Heartbeats do not change the
/// epoch, so they never wait for it.
/// `fence`: what the statement's writes check, computed once: `whole` when every partition is held (the usual
/// case: no row needs a check of its own), otherwise the `partitions` held.
///
/// Each partition's epoch is the element of `$3` at the partition's number, not found by a join of the arrays with
/// the table (such a join, planned for ten rows, became a nested loop over both) nor by its position in the list of
/// partitions (`array_position`, a walk of the list for every row: with all 256 partitions, 0.71 ms of the
/// statement against 0.20 ms by index, measured with pgbench, prepared, on PostgreSQL 15). The table holds 256
/// rows, a few pages, read whole.
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
 WHERE p.owner = $1 AND p.epoch = ($3::int8[])[p.partition + 1]",
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

/// The leases as the fence binds them: the partitions (`$2`) and their epochs by partition (`$3`, see
/// [`by_partition`]).
pub(super) fn lease_arrays(leases: impl Iterator<Item = (u16, i64)> + Clone) -> (Vec<i16>, Vec<Option<i64>>) {
    let partitions = leases.clone().map(|(partition, _)| i16::try_from(partition).unwrap_or(i16::MAX)).collect();
    (partitions, by_partition(leases))
}

/// `values` as an array indexed by partition (PostgreSQL's arrays count from 1: partition `p` at `p + 1`), `NULL`
/// for the partitions not given, which no comparison matches.
pub(super) fn by_partition<T>(values: impl Iterator<Item = (u16, T)> + Clone) -> Vec<Option<T>> {
    let len = values.clone().map(|(partition, _)| usize::from(partition) + 1).max().unwrap_or(0);
    let mut array: Vec<Option<T>> = std::iter::repeat_with(|| None).take(len).collect();
    for (partition, value) in values {
        array[usize::from(partition)] = Some(value);
    }
    array
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_are_placed_at_their_partition_and_the_others_are_null() {
        assert_eq!(super::by_partition([(2_u16, 5_i64), (0, 1)].into_iter()), [Some(1), None, Some(5)]);
        assert_eq!(super::by_partition(std::iter::empty::<(u16, i64)>()), []);
        let (partitions, epochs) = super::lease_arrays([(255, 7)].into_iter());
        assert_eq!((partitions, epochs.len(), epochs[255]), (vec![255], 256, Some(7)));
    }
}
