-- Event ids as the outbox writes and compares them: lowercase hyphenated UUID text. A row written by plain SQL with
-- another form (a BLOB, as sqlx binds a `uuid::Uuid`; upper case; braces; no hyphens; not a UUID at all) stopped the
-- relay's reads, or was published and never settled (every statement compares ids as this text); it is refused
-- with one line saying the form it must have. Rows written before this migration keep their ids.
CREATE TRIGGER IF NOT EXISTS outbox_events_id_is_a_uuid
BEFORE INSERT ON outbox_events
WHEN NOT (typeof(NEW.id) = 'text' AND NEW.id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]')
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.id must be a UUID as lowercase hyphenated text (bind it as a string: uuid.hyphenated().to_string())');
END;

CREATE TRIGGER IF NOT EXISTS outbox_events_id_stays_a_uuid
BEFORE UPDATE OF id ON outbox_events
WHEN NOT (typeof(NEW.id) = 'text' AND NEW.id GLOB '[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]')
BEGIN
    SELECT RAISE(ABORT, 'outbox_events.id must be a UUID as lowercase hyphenated text (bind it as a string: uuid.hyphenated().to_string())');
END;
