-- What the relay role needs beyond postgres_relay_role.sql to run the WAL source (`outbox relay --source wal`): it
-- records its replication slot, how far its message-mode events are published and that it numbered what an earlier
-- version handed over in outbox_control (these four columns only: pausing stays an operator's), it writes the
-- message-mode events that leave the stream (to be retried, or failed for good) into the table, and it records the
-- aggregates it hands to the table's retry path.
--
-- Run it after postgres_relay_role.sql, as the owner of the outbox tables. The login role needs REPLICATION too:
-- ALTER ROLE ... REPLICATION (on RDS and Aurora: GRANT rds_replication TO ...).
GRANT UPDATE (wal_slot, wal_backlog_through, wal_published_through, wal_hand_over_numbered)
    ON outbox_control TO outbox_relay;
GRANT INSERT ON outbox_events TO outbox_relay;
-- The aggregates it hands to the table's retry path (migration 14).
GRANT SELECT, INSERT, DELETE ON outbox_wal_handed_over TO outbox_relay;
-- The numbers that order the rows it hands over (migration 16).
GRANT USAGE ON SEQUENCE outbox_wal_hand_over_order TO outbox_relay;
-- The functions the WAL relay reads and settles streamed rows with (migrations 10, renamed by 16, and 11; they run
-- with the caller's rights). PostgreSQL grants EXECUTE to PUBLIC by default; this keeps them callable where that was
-- revoked.
GRANT EXECUTE ON FUNCTION outbox_wal_pending_by_id(UUID[]) TO outbox_relay;
GRANT EXECUTE ON FUNCTION outbox_settle_published_at(UUID[], TEXT[], BOOLEAN) TO outbox_relay;
-- The partition of a message-mode event's aggregate, for the hand-over.
GRANT EXECUTE ON FUNCTION outbox_partition_of(TEXT, TEXT) TO outbox_relay;
