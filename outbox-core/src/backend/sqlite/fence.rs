//! The lease fence of the statements that write for a batch (its record and its settle): SQLite has one partition,
//! 0, and runs one write at a time, so a takeover comes wholly before or after such a statement.

/// Whether the relay `?2` still holds partition 0 at epoch `?3`.
pub(super) const HELD: &str =
    "EXISTS (SELECT 1 FROM outbox_partitions p WHERE p.partition = 0 AND p.owner = ?2 AND p.epoch = ?3)";

/// The epoch of partition 0 among `leases` (`-1`, which no lease has, when it is not there).
pub(super) fn partition_zero_epoch(mut leases: impl Iterator<Item = (u16, i64)>) -> i64 {
    leases.find(|(partition, _)| *partition == 0).map_or(-1, |(_, epoch)| epoch)
}
