//! The versioning policy [`diff`](super::diff) applies across versions: the schema as the differ sees it,
//! reserved property names (`RESERVED_PROPERTY_REUSED`) and which changes count as breaks.

use std::collections::BTreeMap;

use serde_json::Value;

use super::compat::{compare, escape, Change};
use super::resolve::resolve;
use super::{ContentModel, DiffOptions, Rule};

/// The root keyword of a contract file that remembers properties removed from that version in place:
/// `{ "<json pointer>": <the property's last schema, resolved> }`. The [snapshot](super::Snapshot) maintains
/// it; the differ treats its names as taken.
pub const RESERVED: &str = "x-outbox-reserved";

/// The schema as the differ sees it: references resolved, the reserved list set aside.
pub(crate) fn comparable(schema: &Value) -> Value {
    let mut resolved = resolve(schema).schema;
    if let Value::Object(map) = &mut resolved {
        map.remove(RESERVED);
    }
    resolved
}

pub(super) fn breaking(changes: Vec<Change>, options: &DiffOptions) -> impl Iterator<Item = Change> + '_ {
    changes.into_iter().filter(|c| options.mode.is_broken_by(c.backward, c.forward) && !c.rule.is_policy())
}

/// Every property of a resolved schema, by JSON pointer, with its schema.
pub(crate) fn property_pointers(schema: &Value) -> BTreeMap<String, Value> {
    let mut found = BTreeMap::new();
    collect_properties(schema, "", &mut found, 0);
    found
}

fn collect_properties(node: &Value, at: &str, found: &mut BTreeMap<String, Value>, depth: usize) {
    let Value::Object(map) = node else { return };
    if depth > 64 {
        return;
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        for (name, schema) in properties {
            let pointer = format!("{at}/properties/{}", escape(name));
            found.insert(pointer.clone(), schema.clone());
            collect_properties(schema, &pointer, found, depth + 1);
        }
    }
    for keyword in ["items", "additionalProperties"] {
        if let Some(child) = map.get(keyword).filter(|c| c.is_object()) {
            collect_properties(child, &format!("{at}/{keyword}"), found, depth + 1);
        }
    }
    for keyword in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        for (index, child) in map.get(keyword).and_then(Value::as_array).into_iter().flatten().enumerate() {
            collect_properties(child, &format!("{at}/{keyword}/{index}"), found, depth + 1);
        }
    }
}

/// The names taken by the committed versions of an event type: every property any version has (the latest
/// version that has it wins) and every [`RESERVED`] entry.
pub(super) fn reserved_names<'s>(versions: impl Iterator<Item = (u32, &'s Value)>) -> BTreeMap<String, (Value, u32)> {
    let mut names = BTreeMap::new();
    for (version, schema) in versions {
        if let Some(Value::Object(entries)) = schema.get(RESERVED) {
            for (pointer, property) in entries {
                names.insert(pointer.clone(), (property.clone(), version));
            }
        }
        for (pointer, property) in property_pointers(&comparable(schema)) {
            names.insert(pointer, (property, version));
        }
    }
    names
}

/// `RESERVED_PROPERTY_REUSED` for each property of `new` that `baseline` lacks and that an older contract used
/// with an incompatible type.
pub(super) fn reused(
    reserved: &BTreeMap<String, (Value, u32)>,
    baseline: Option<&Value>,
    new: &Value,
    model: ContentModel,
) -> Vec<Change> {
    let present = baseline.map(property_pointers).unwrap_or_default();
    let mut changes = Vec::new();
    for (pointer, property) in property_pointers(new) {
        if present.contains_key(&pointer) {
            continue;
        }
        let Some((earlier, version)) = reserved.get(&pointer) else { continue };
        let clashes = compare(earlier, &property, model)
            .iter()
            .any(|c| (c.backward || c.forward) && !matches!(c.rule, Rule::SensitiveFlagRemoved));
        if clashes {
            changes.push(Change {
                rule: Rule::ReservedPropertyReused,
                pointer,
                old: format!("{} in v{version}", describe(earlier)),
                new: describe(&property),
                backward: true,
                forward: true,
            });
        }
    }
    changes
}

fn describe(schema: &Value) -> String {
    super::compat::summary(schema)
}
