-- `seq` is an identity column: its values are unique by construction, and every query that orders by it reads
-- one of the partial indexes (pending, per-aggregate) or sorts a filtered few rows. The unique index cost a write
-- on every row version (insert, claim, settle) and served no query.
DROP INDEX IF EXISTS outbox_events_seq_idx;
