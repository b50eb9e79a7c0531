-- `OutboxTransaction`'s commit in one call per transaction. Its statements travel with the `COMMIT` in one
-- simple-protocol message, so the server parses and plans them at every commit; a PL/pgSQL function's statements
-- are prepared once per session and keep their plans. The functions do what the commit sent before, no more.
--
-- Rows: the `INSERT` of the buffered events, with literal values, cost the server about as much to parse and plan
-- as to run. `outbox_insert_events` runs the same `INSERT` as the parameterized enqueue, from arrays;
-- `outbox_insert_event` inserts one event from plain values (building the arrays cost a fifth of the row).
--
-- Messages: the commit sent migration 8's guard as a statement of its own, then one `pg_logical_emit_message` per
-- event: the guard's statement and its two nested PL/pgSQL calls cost the database more than the message itself.
-- `outbox_wal_emit` writes the first message after the same check, in one statement and one PL/pgSQL call, with
-- the common case (a check this session remembers) inline. What is exact stays exact: the emit lock is taken
-- shared before the message, in the same transaction, and a check that is not remembered, or fails, goes through
-- `outbox_wal_emit_guard`, which raises OXW01 and so rolls the whole transaction back, messages included.

-- Inserts one pending event per array element, in the arrays' order (the order of their `seq`), as the
-- parameterized enqueue does.
CREATE OR REPLACE FUNCTION outbox_insert_events(ids UUID[], aggregate_types TEXT[], aggregate_ids TEXT[],
                                                event_types TEXT[], schema_versions INT4[], payloads TEXT[],
                                                header_sets TEXT[], sensitive_path_sets TEXT[]) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO outbox_events
        (id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths)
    SELECT e.id, e.aggregate_type, e.aggregate_id, e.event_type, e.schema_version,
           e.payload::jsonb, e.headers::jsonb, e.sensitive_paths::jsonb
      FROM UNNEST(ids, aggregate_types, aggregate_ids, event_types, schema_versions, payloads, header_sets,
                  sensitive_path_sets)
           WITH ORDINALITY
           AS e(id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths, n)
     -- The transaction has its id before its first row takes a `seq`.
     WHERE pg_current_xact_id() IS NOT NULL
     ORDER BY e.n;
END
$$;

-- Inserts one pending event, as `outbox_insert_events` does.
CREATE OR REPLACE FUNCTION outbox_insert_event(id UUID, aggregate_type TEXT, aggregate_id TEXT, event_type TEXT,
                                               schema_version INT4, payload TEXT, headers TEXT,
                                               sensitive_paths TEXT) RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    INSERT INTO outbox_events
        (id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, sensitive_paths)
    SELECT outbox_insert_event.id, outbox_insert_event.aggregate_type, outbox_insert_event.aggregate_id,
           outbox_insert_event.event_type, outbox_insert_event.schema_version, outbox_insert_event.payload::jsonb,
           outbox_insert_event.headers::jsonb, outbox_insert_event.sensitive_paths::jsonb
     WHERE pg_current_xact_id() IS NOT NULL;
END
$$;

-- Writes `content` as a transactional logical decoding message with `prefix` once message-mode events may be written
-- (`outbox_wal_slot_ready`), and returns its position; raises OXW01 otherwise.
CREATE OR REPLACE FUNCTION outbox_wal_emit(emit_lock BIGINT, prefix TEXT, content TEXT) RETURNS pg_lsn
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    -- `outbox_wal_slot_ready`'s remembered check, inline: calling it would cost as much as the rest of this call.
    -- A NULL (this session has not found the slot yet) goes to the full check, as a clock set back does.
    IF NOT COALESCE(pg_try_advisory_xact_lock_shared(emit_lock)
                    AND floor((date_part('epoch', clock_timestamp())
                               - NULLIF(current_setting('outbox.wal_slot_checked_at', true), '')::float8)
                              / date_part('epoch', outbox_wal_check_lifetime())) = 0, false) THEN
        PERFORM outbox_wal_emit_guard(emit_lock);
    END IF;
    RETURN pg_logical_emit_message(true, prefix, content);
END
$$;
