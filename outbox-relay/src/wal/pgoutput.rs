//! Decoding the two `pgoutput` messages the WAL source reads (protocol version 1, text format): `Relation`,
//! which names a published table and says where its `id` column is, and `Insert`, whose `id` it takes when the
//! table is the outbox table. The replication client decodes the transaction frame (`Begin`, `Commit`, logical
//! messages) itself; everything else is skipped.

use std::collections::HashMap;

use uuid::Uuid;

/// The outbox table's name (its schema is the one the relay's statements find it in).
const OUTBOX_TABLE: &str = "outbox_events";

/// A `pgoutput` message that does not parse, or an insert the relay cannot place. Never holds row data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed pgoutput message: {0}")]
pub(crate) struct Malformed(&'static str);

/// What a `Relation` message announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Announced {
    /// The outbox table: its inserts are events.
    Outbox,
    /// Another table that the publication also publishes (`schema.table`, as the stream names it): its inserts are
    /// ignored.
    Other(String),
}

/// The relations announced on the stream so far: for each relation id, the position of the `id` column when the
/// relation is the outbox table, `None` for any other table (added to the publication by hand: never an event).
#[derive(Debug)]
pub(crate) struct Relations {
    /// The outbox table's schema.
    schema: String,
    id_column: HashMap<u32, Option<usize>>,
}

impl Relations {
    /// No relation yet; the outbox table is `outbox_events` of `schema`.
    pub(crate) fn of(schema: &str) -> Self {
        Self { schema: schema.to_owned(), id_column: HashMap::new() }
    }

    /// Takes a `Relation` message (tag `R`) into account. A relation id announced again (its table renamed,
    /// altered) takes its new name and columns.
    pub(crate) fn apply(&mut self, message: &[u8]) -> Result<Announced, Malformed> {
        let mut r = Reader::after_tag(message, b'R')?;
        let relation = r.u32()?;
        let namespace = r.cstr()?;
        let name = r.cstr()?;
        let _replica_identity = r.u8()?;
        let columns = usize::try_from(r.i16()?).map_err(|_| Malformed("negative column count"))?;
        let mut id = None;
        for index in 0..columns {
            let _flags = r.u8()?;
            if r.cstr()? == b"id" {
                id = Some(index);
            }
            let _type = r.u32()?;
            let _modifier = r.u32()?;
        }
        if namespace != self.schema.as_bytes() || name != OUTBOX_TABLE.as_bytes() {
            self.id_column.insert(relation, None);
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            return Ok(Announced::Other(format!("{}.{}", text(namespace), text(name))));
        }
        let id = id.ok_or(Malformed("the published table has no `id` column"))?;
        self.id_column.insert(relation, Some(id));
        Ok(Announced::Outbox)
    }

    /// The event id of an `Insert` message (tag `I`) into the outbox table; `None` for an insert into another
    /// table.
    pub(crate) fn inserted_id(&self, message: &[u8]) -> Result<Option<Uuid>, Malformed> {
        let mut r = Reader::after_tag(message, b'I')?;
        let relation = r.u32()?;
        let Some(id_column) = *self.id_column.get(&relation).ok_or(Malformed("an insert before its relation"))? else {
            return Ok(None);
        };
        if r.u8()? != b'N' {
            return Err(Malformed("an insert without a new tuple"));
        }
        let columns = usize::try_from(r.i16()?).map_err(|_| Malformed("negative column count"))?;
        for index in 0..columns {
            let value = match r.u8()? {
                b't' => {
                    let len = usize::try_from(r.u32()?).map_err(|_| Malformed("column too long"))?;
                    Some(r.bytes(len)?)
                }
                b'n' | b'u' => None,
                _ => return Err(Malformed("a column that is neither text, null nor unchanged")),
            };
            if index == id_column {
                let text = value.ok_or(Malformed("an insert with a null id"))?;
                let text = std::str::from_utf8(text).map_err(|_| Malformed("an id that is not UTF-8"))?;
                return Uuid::parse_str(text).map(Some).map_err(|_| Malformed("an id that is not a UUID"));
            }
        }
        Err(Malformed("an insert without its id column"))
    }
}

/// A cursor over a message.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn after_tag(message: &'a [u8], tag: u8) -> Result<Self, Malformed> {
        match message.split_first() {
            Some((&first, rest)) if first == tag => Ok(Self { rest }),
            _ => Err(Malformed("unexpected message tag")),
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.rest.len() < n {
            return Err(Malformed("message ends early"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.bytes(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn cstr(&mut self) -> Result<&'a [u8], Malformed> {
        let end = self.rest.iter().position(|&b| b == 0).ok_or(Malformed("unterminated string"))?;
        let text = &self.rest[..end];
        self.rest = &self.rest[end + 1..];
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::{Announced, Malformed, Relations};
    use uuid::Uuid;

    fn relation(oid: u32, columns: &[&str]) -> Vec<u8> {
        relation_of(oid, "public", "outbox_events", columns)
    }

    fn relation_of(oid: u32, namespace: &str, name: &str, columns: &[&str]) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(oid.to_be_bytes());
        for text in [namespace, name] {
            m.extend(text.as_bytes());
            m.push(0);
        }
        m.push(b'd');
        m.extend((columns.len() as i16).to_be_bytes());
        for name in columns {
            m.push(0);
            m.extend(name.as_bytes());
            m.push(0);
            m.extend(2950u32.to_be_bytes());
            m.extend((-1i32).to_be_bytes());
        }
        m
    }

    fn insert(oid: u32, values: &[Option<&str>]) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(oid.to_be_bytes());
        m.push(b'N');
        m.extend((values.len() as i16).to_be_bytes());
        for value in values {
            match value {
                Some(text) => {
                    m.push(b't');
                    m.extend((text.len() as u32).to_be_bytes());
                    m.extend(text.as_bytes());
                }
                None => m.push(b'n'),
            }
        }
        m
    }

    #[test]
    fn the_id_is_found_by_column_name_whatever_columns_are_published() {
        let id = Uuid::now_v7();
        let mut relations = Relations::of("public");
        assert_eq!(relations.apply(&relation(7, &["id"])), Ok(Announced::Outbox));
        assert_eq!(relations.inserted_id(&insert(7, &[Some(&id.to_string())])), Ok(Some(id)));
        relations.apply(&relation(8, &["seq", "id", "payload"])).unwrap();
        let row = insert(8, &[Some("12"), Some(&id.to_string()), None]);
        assert_eq!(relations.inserted_id(&row), Ok(Some(id)));
    }

    #[test]
    fn truncated_or_unannounced_messages_are_errors_not_panics() {
        let mut relations = Relations::of("public");
        let id = Uuid::now_v7().to_string();
        assert_eq!(relations.inserted_id(&insert(7, &[Some(&id)])), Err(Malformed("an insert before its relation")));
        relations.apply(&relation(7, &["id"])).unwrap();
        let full = insert(7, &[Some(&id)]);
        for cut in 0..full.len() {
            assert!(relations.inserted_id(&full[..cut]).is_err(), "accepted a message cut at {cut}");
        }
        assert!(relations.apply(&relation(9, &["seq"])).is_err(), "an outbox table without an id column");
        assert!(relations.inserted_id(&insert(7, &[None])).is_err(), "a null id");
        assert!(relations.inserted_id(&insert(7, &[Some("not-a-uuid")])).is_err());
    }

    #[test]
    fn inserts_into_any_other_published_table_are_ignored() {
        let id = Uuid::now_v7().to_string();
        let mut relations = Relations::of("shop");
        for (oid, namespace, name, columns) in [
            (10, "shop", "audit", &["id"][..]),
            (11, "shop", "notes", &["note"][..]),
            (12, "public", "outbox_events", &["id"][..]),
            (13, "shop", "outbox_events_archive", &["id"][..]),
        ] {
            let announced = relations.apply(&relation_of(oid, namespace, name, columns));
            assert_eq!(announced, Ok(Announced::Other(format!("{namespace}.{name}"))));
        }
        assert_eq!(relations.inserted_id(&insert(10, &[Some("12")])), Ok(None), "a bigint id");
        assert_eq!(relations.inserted_id(&insert(11, &[Some("text")])), Ok(None), "no id column");
        assert_eq!(relations.inserted_id(&insert(12, &[Some(&id)])), Ok(None), "another schema's outbox_events");
        relations.apply(&relation_of(14, "shop", "outbox_events", &["id"])).unwrap();
        assert_eq!(relations.inserted_id(&insert(14, &[Some(&id)])), Ok(Some(id.parse().unwrap())));
        // A relation announced again under another name (renamed) is no longer the outbox table, and back.
        relations.apply(&relation_of(14, "shop", "renamed", &["id"])).unwrap();
        assert_eq!(relations.inserted_id(&insert(14, &[Some(&id)])), Ok(None));
        relations.apply(&relation_of(10, "shop", "outbox_events", &["id"])).unwrap();
        assert_eq!(relations.inserted_id(&insert(10, &[Some(&id)])), Ok(Some(id.parse().unwrap())));
    }
}
