//! Array keywords: `minItems`, `maxItems`, `uniqueItems`, `items`, `prefixItems`.

use super::*;

impl Walk {
    pub(super) fn arrays(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str, depth: usize) {
        let (tightened, loosened) = (Rule::ArrayConstraintTightened, Rule::ArrayConstraintLoosened);
        self.bound(old, new, at, "minItems", true, tightened, loosened);
        self.bound(old, new, at, "maxItems", false, tightened, loosened);
        let unique = |map: &Map<String, Value>| map.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false);
        let text = |on: bool| if on { "uniqueItems true" } else { "uniqueItems false" }.to_owned();
        match (unique(old), unique(new)) {
            (false, true) => self.push(tightened, &format!("{at}/uniqueItems"), text(false), text(true), true, false),
            (true, false) => self.push(loosened, &format!("{at}/uniqueItems"), text(true), text(false), false, true),
            _ => {}
        }
        let (old_prefix, old_rest) = tuple(old);
        let (new_prefix, new_rest) = tuple(new);
        for index in 0..old_prefix.len().max(new_prefix.len()) {
            let old_item = old_prefix.get(index).unwrap_or(old_rest);
            let new_item = new_prefix.get(index).unwrap_or(new_rest);
            self.node(old_item, new_item, &format!("{at}/prefixItems/{index}"), depth + 1);
        }
        self.node(old_rest, new_rest, &format!("{at}/items"), depth + 1);
    }
}

/// `(prefixItems, the schema of the items after them)`, for 2020-12 and draft-07 tuples alike.
pub(super) fn tuple(map: &Map<String, Value>) -> (&[Value], &Value) {
    let rest = |key: &str| map.get(key).filter(|v| !v.is_array()).unwrap_or(&ANY);
    match (map.get("prefixItems"), map.get("items")) {
        (Some(Value::Array(prefix)), _) => (prefix, rest("items")),
        (_, Some(Value::Array(prefix))) => (prefix, rest("additionalItems")),
        _ => (&[], rest("items")),
    }
}
