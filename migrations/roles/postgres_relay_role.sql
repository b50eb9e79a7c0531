-- The least-privileged PostgreSQL role for the relay: it reads, settles and (with retention) deletes outbox rows,
-- keeps its membership, partition leases and batch records, shares the backlog gauges' counts, and reads the pause
-- flag. It cannot insert events, touch other tables, or pause the outbox.
--
-- Run it once as the owner of the outbox tables, after `outbox migrate`, then give the role a login as your
-- deployment does:  ALTER ROLE outbox_relay LOGIN PASSWORD '...';
-- `outbox pause` / `outbox resume` need INSERT and UPDATE on outbox_control: run them as an operator role.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_relay') THEN
        CREATE ROLE outbox_relay NOLOGIN;
    END IF;
END
$$;

GRANT SELECT, UPDATE, DELETE ON outbox_events TO outbox_relay;
GRANT SELECT ON outbox_control TO outbox_relay;
-- Membership, partition leases (the partitions themselves are created by `outbox migrate`) and batches in flight.
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_relays, outbox_batches TO outbox_relay;
GRANT SELECT, UPDATE ON outbox_partitions TO outbox_relay;
-- The backlog gauges' counts, which the relays of a database take in turn and share.
GRANT SELECT, UPDATE ON outbox_backlog_counts TO outbox_relay;
