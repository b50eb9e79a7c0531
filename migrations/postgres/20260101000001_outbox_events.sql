-- The outbox table: one row per event, written in the same transaction as the domain change.
-- Column names follow the reference design (id, aggregate_type, aggregate_id, event_type, payload, status,
-- attempts, next_attempt_at, created_at, published_at); the rest is what the relay needs.
CREATE TABLE IF NOT EXISTS outbox_events (
    id               UUID        PRIMARY KEY,
    -- Insertion order; the relay publishes the events of one aggregate in this order.
    seq              BIGINT      GENERATED ALWAYS AS IDENTITY,
    aggregate_type   TEXT        NOT NULL,
    aggregate_id     TEXT        NOT NULL,
    event_type       TEXT        NOT NULL,
    schema_version   INTEGER     NOT NULL DEFAULT 1 CHECK (schema_version >= 1),
    payload          JSONB       NOT NULL,
    -- Message headers captured at enqueue, e.g. the W3C `traceparent`.
    headers          JSONB       NOT NULL DEFAULT '{}'::jsonb,
    -- JSON pointers (RFC 6901; `*` matches every array element) of the payload's sensitive values.
    sensitive_paths  JSONB       NOT NULL DEFAULT '[]'::jsonb,
    status           TEXT        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'in_flight', 'published', 'failed', 'cancelled')),
    attempts         INTEGER     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at     TIMESTAMPTZ,
    -- A short description of the last publish failure; never the payload.
    last_error       TEXT,
    -- The relay that holds the row while it is in flight, until when, and a fencing token that grows with every claim.
    lease_owner      UUID,
    lease_expires_at TIMESTAMPTZ,
    lease_epoch      BIGINT      NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX IF NOT EXISTS outbox_events_seq_idx ON outbox_events (seq);

-- Partial: its size follows the backlog, not the table's history.
CREATE INDEX IF NOT EXISTS outbox_events_pending_idx
    ON outbox_events (next_attempt_at, seq)
    WHERE status = 'pending';

-- Expired leases are found here.
CREATE INDEX IF NOT EXISTS outbox_events_in_flight_idx
    ON outbox_events (lease_expires_at)
    WHERE status = 'in_flight';

-- Unfinished events per aggregate, oldest first: ordering and head-of-line checks.
CREATE INDEX IF NOT EXISTS outbox_events_aggregate_idx
    ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE status IN ('pending', 'in_flight', 'failed');

CREATE INDEX IF NOT EXISTS outbox_events_failed_idx
    ON outbox_events (event_type, created_at)
    WHERE status = 'failed';

-- Consumer side: one row per (consumer, event) already processed.
CREATE TABLE IF NOT EXISTS outbox_inbox (
    consumer     TEXT        NOT NULL,
    event_id     UUID        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX IF NOT EXISTS outbox_inbox_processed_at_idx ON outbox_inbox (processed_at);
