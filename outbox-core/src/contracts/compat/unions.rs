//! Unions: `anyOf`, `oneOf`, `allOf` and `type` lists, split into branches that are paired by tag or type.

use super::*;

impl Walk {
    pub(super) fn union(
        &mut self,
        old: &Value,
        old_branches: &[Value],
        new: &Value,
        new_branches: &[Value],
        at: &str,
        depth: usize,
    ) {
        let old_keyword = union_keyword(old);
        let new_keyword = union_keyword(new);
        let pointer = |keyword: Option<&str>, index: usize| match keyword {
            Some(keyword) => format!("{at}/{keyword}/{index}"),
            None => at.to_owned(),
        };
        // Paired by every tag first, then by the key alone: the branches of two flattened enums crossed share the
        // tag of the first enum.
        let tags = |branches: &[Value]| branches.iter().map(branch_tags).collect::<Vec<_>>();
        let keys = |branches: &[Value]| branches.iter().map(branch_key).collect::<Vec<_>>();
        let mut paired = vec![false; new_branches.len()];
        let mut partners: Vec<Option<usize>> = vec![None; old_branches.len()];
        let passes = [(tags(old_branches), tags(new_branches)), (keys(old_branches), keys(new_branches))];
        for (old_keys, new_keys) in passes {
            for (index, key) in old_keys.iter().enumerate() {
                if partners[index].is_none() {
                    partners[index] = (0..new_keys.len()).find(|&j| !paired[j] && new_keys[j] == *key);
                    if let Some(j) = partners[index] {
                        paired[j] = true;
                    }
                }
            }
        }
        // Branches merged with the keywords beside their union (a struct with a flattened enum) are the object
        // itself: what they share is reported once, at the object's own pointers.
        let merged = has_constraints_beside(old, old_keyword) || has_constraints_beside(new, new_keyword);
        for (index, branch) in old_branches.iter().enumerate() {
            let at_old = pointer(old_keyword, index);
            match partners[index] {
                Some(j) => {
                    let at_pair = if merged { at } else { &at_old };
                    self.sensitivity(is_sensitive(branch), is_sensitive(&new_branches[j]), at_pair);
                    self.single(branch, &new_branches[j], at_pair, depth + 1);
                }
                None => self.push(Rule::BranchRemoved, &at_old, branch_text(branch), "absent".to_owned(), true, false),
            }
        }
        for (j, branch) in new_branches.iter().enumerate().filter(|(j, _)| !paired[*j]) {
            self.push(
                Rule::BranchAdded,
                &pointer(new_keyword, j),
                "absent".to_owned(),
                branch_text(branch),
                false,
                true,
            );
        }
    }
}

pub(super) fn union_keyword(value: &Value) -> Option<&'static str> {
    let map = value.as_object()?;
    ["anyOf", "oneOf"].into_iter().find(|k| map.get(*k).and_then(Value::as_array).is_some_and(|a| !a.is_empty()))
}

/// Unions that would cross into more branches than this (several flattened enums) are listed side by side
/// instead; past this many branches in all (unions nested in branches), the rest is not compared.
const MAX_BRANCHES: usize = 256;
/// Unions nested deeper than this are compared as plain schemas.
const MAX_UNION_DEPTH: usize = 8;

/// What a schema says about `null`, found while its branches are collected.
#[derive(Default)]
struct Nulls {
    /// It accepts `null`: named (below), or as any value (`true`, `{}`, a schema without a type).
    accepted: bool,
    /// It names `null`: a `type` that lists it, a `{ "type": "null" }` branch, `null` in `enum` or `const`. What
    /// serde reads a missing value as `None` for (an `Option<T>`); a missing `serde_json::Value`, which accepts
    /// null as any value, is an error.
    named: bool,
}

/// The alternatives of a schema with `null` split off: `(branches, accepts null)`. Nested unions are flattened,
/// `allOf` is merged, a `null` in a `type` list or a `{ "type": "null" }` branch becomes the flag. Keywords
/// beside a union apply to every branch (a struct with a `#[serde(flatten)]` enum is its own properties and one
/// `oneOf` of the variants): each branch is merged with them.
pub(super) fn branches(value: &Value) -> (Vec<Value>, bool) {
    let (out, nulls) = collect(value);
    (out, nulls.accepted)
}

/// Whether a schema names `null` (see [`Nulls::named`]), so a tolerant reader reads it missing as `None`.
pub(super) fn names_null(value: &Value) -> bool {
    collect(value).1.named
}

/// The branches of `value` and what it says about `null`.
fn collect(value: &Value) -> (Vec<Value>, Nulls) {
    let mut out = Vec::new();
    let mut nulls = Nulls::default();
    collect_branches(value, &mut out, &mut nulls, 0);
    if out.iter().any(|b| matches!(b, Value::Bool(true))) {
        nulls.accepted = true;
    }
    if out.is_empty() && !nulls.accepted {
        // Every branch contradicted the keywords beside its union.
        out.push(Value::Bool(false));
    }
    (out, nulls)
}

/// Adds the branches of `value` to `out`, `depth` unions down, and what they say about `null` to `nulls`.
fn collect_branches(value: &Value, out: &mut Vec<Value>, nulls: &mut Nulls, depth: usize) {
    if out.len() >= MAX_BRANCHES {
        return;
    }
    let value = merge_all_of(value);
    if let Some(keyword) = union_keyword(&value).filter(|_| depth < MAX_UNION_DEPTH) {
        let alternatives = |union: &Value| union[keyword].as_array().cloned().unwrap_or_default();
        let Some(mut siblings) = constraints_beside(&value, keyword) else {
            for branch in alternatives(&value) {
                collect_branches(&branch, out, nulls, depth + 1);
            }
            return;
        };
        // The unions kept in `allOf` by the merge: each branch of this one is merged with them, which crosses them.
        let kept: Vec<Vec<Value>> = match siblings.get("allOf") {
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|part| Some(part[union_keyword(part)?].as_array()?.clone())).collect()
            }
            _ => Vec::new(),
        };
        let crossed = kept.iter().fold(alternatives(&value).len(), |count, more| count.saturating_mul(more.len()));
        let unions = if crossed <= MAX_BRANCHES {
            vec![alternatives(&value)]
        } else {
            // Too many to cross: each union's branches side by side, merged with the other keywords. Wider than
            // the schema (a value matches a branch of each union), but every branch is compared.
            siblings.remove("allOf");
            std::iter::once(alternatives(&value)).chain(kept).collect()
        };
        for branch in unions.iter().flatten() {
            match with_siblings(&siblings, branch) {
                // A branch the keywords beside it contradict (`{ "type": "null" }` beside `"type": "object"`).
                Value::Bool(false) => {}
                merged => collect_branches(&merged, out, nulls, depth + 1),
            }
        }
        return;
    }
    let Value::Object(mut map) = value else {
        if value == Value::Bool(true) {
            nulls.accepted = true;
        }
        if value != Value::Bool(false) || out.is_empty() {
            out.push(value);
        }
        return;
    };
    let types = types_of(&map);
    if types & NULL != 0 {
        nulls.accepted = true;
        nulls.named |= names_types(&map);
    }
    if types == NULL {
        return;
    }
    if types & NULL != 0 {
        if let Some(Value::Array(names)) = map.get_mut("type") {
            names.retain(|name| name != "null");
            if names.len() == 1 {
                let only = names.remove(0);
                map.insert("type".to_owned(), only);
            }
        }
        for key in ["enum", "const"] {
            if let Some(Value::Array(values)) = map.get_mut(key) {
                values.retain(|v| !v.is_null());
            }
        }
        if map.get("const").is_some_and(Value::is_null) {
            map.remove("const");
        }
    }
    out.push(Value::Object(map));
}

/// The keywords beside a union that constrain values (annotations aside), or `None` when there are none.
fn constraints_beside(value: &Value, keyword: &str) -> Option<Map<String, Value>> {
    let siblings: Map<String, Value> = value
        .as_object()?
        .iter()
        .filter(|(key, _)| *key != keyword && !ANNOTATIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    (!siblings.is_empty()).then_some(siblings)
}

/// Whether the union `keyword` of `value` has keywords beside it that constrain values.
fn has_constraints_beside(value: &Value, keyword: Option<&str>) -> bool {
    let (Some(map), Some(keyword)) = (value.as_object(), keyword) else { return false };
    map.keys().any(|key| key != keyword && !ANNOTATIONS.contains(&key.as_str()))
}

/// A branch of a union with the keywords beside the union merged in, as `allOf` parts are merged.
fn with_siblings(siblings: &Map<String, Value>, branch: &Value) -> Value {
    match branch {
        Value::Bool(true) => Value::Object(siblings.clone()),
        Value::Object(branch) => merge_parts(siblings.clone(), [branch]),
        other => other.clone(),
    }
}

/// `allOf` merged into the schema around it. A part's union that clashes with one already there (two flattened
/// enums: `allOf: [{ oneOf: A }, { oneOf: B }]`) is kept in `allOf`, and [`collect_branches`] merges it into
/// each branch of the first: every constraint is kept.
pub(super) fn merge_all_of(value: &Value) -> Value {
    let Some(map) = value.as_object() else { return value.clone() };
    let Some(parts) = map.get("allOf").and_then(Value::as_array) else { return value.clone() };
    let mut merged = map.clone();
    merged.remove("allOf");
    merge_parts(merged, parts.iter().filter_map(Value::as_object))
}

/// `parts` merged into `merged`: properties and `required` joined (a property in both is the merge of its two
/// schemas), types intersected (`Value::Bool(false)` when nothing is left), a clashing union kept in `allOf`;
/// any other keyword already there stays.
fn merge_parts<'p>(mut merged: Map<String, Value>, parts: impl IntoIterator<Item = &'p Map<String, Value>>) -> Value {
    let mut parts: Vec<&Map<String, Value>> = parts.into_iter().collect();
    parts.reverse();
    let mut kept = Vec::new();
    while let Some(part) = parts.pop() {
        for (key, part_value) in part {
            match (merged.get_mut(key), part_value) {
                (_, Value::Array(nested)) if key == "allOf" => {
                    parts.extend(nested.iter().rev().filter_map(Value::as_object));
                }
                (None, _) => {
                    merged.insert(key.clone(), part_value.clone());
                }
                (Some(Value::Object(props)), Value::Object(more)) if key == "properties" => {
                    for (name, schema) in more {
                        match props.get_mut(name) {
                            None => {
                                props.insert(name.clone(), schema.clone());
                            }
                            Some(existing) if existing != schema => {
                                let both = Value::Array(vec![existing.clone(), schema.clone()]);
                                *existing = merge_all_of(&Value::Object(Map::from_iter([("allOf".to_owned(), both)])));
                            }
                            Some(_) => {}
                        }
                    }
                }
                (Some(Value::Array(names)), Value::Array(more)) if key == "required" => {
                    for name in more {
                        if !names.contains(name) {
                            names.push(name.clone());
                        }
                    }
                }
                (Some(existing), _) if key == "type" && existing != part_value => {
                    let both = type_bits(existing) & type_bits(part_value);
                    if both == 0 {
                        return Value::Bool(false);
                    }
                    *existing = type_value(both);
                }
                (Some(existing), _) if (key == "anyOf" || key == "oneOf") && existing != part_value => {
                    kept.push(Value::Object(Map::from_iter([(key.clone(), part_value.clone())])));
                }
                (Some(_), _) => {}
            }
        }
    }
    match merged.get_mut("allOf") {
        _ if kept.is_empty() => {}
        // The siblings of a union hold the parts kept by an earlier merge.
        Some(Value::Array(earlier)) => earlier.extend(kept),
        _ => {
            merged.insert("allOf".to_owned(), Value::Array(kept));
        }
    }
    Value::Object(merged)
}

/// A key that pairs a branch with its counterpart on the other side: the variant's tag, or its types.
pub(super) fn branch_key(branch: &Value) -> String {
    let Some(map) = as_map(branch) else { return "never".to_owned() };
    if let Some(values) = allowed_values(map).filter(|v| v.len() == 1) {
        return format!("value:{}", values[0]);
    }
    let props = properties(map);
    let required = required(map);
    for (name, schema) in props {
        if required.contains(name.as_str()) {
            if let Some(tag) = as_map(schema).and_then(allowed_values).filter(|v| v.len() == 1) {
                return format!("tag:{name}={}", tag[0]);
            }
        }
    }
    if required.len() == 1 && props.len() == 1 && matches!(map.get("additionalProperties"), Some(Value::Bool(false))) {
        if let Some(name) = required.iter().next() {
            return format!("variant:{name}");
        }
    }
    format!("types:{}", normalized(types_of(map) & !NULL))
}

/// [`branch_key`] followed by every tag of the branch (`tag:kind="card",mode="post"` for a branch of two
/// flattened enums crossed).
pub(super) fn branch_tags(branch: &Value) -> String {
    let mut key = branch_key(branch);
    let Some(map) = as_map(branch) else { return key };
    let required = required(map);
    for (name, schema) in properties(map).iter().filter(|(name, _)| required.contains(name.as_str())) {
        if let Some(tag) = as_map(schema).and_then(allowed_values).filter(|v| v.len() == 1) {
            key.push_str(&format!(",{name}={}", tag[0]));
        }
    }
    key
}

/// A branch in a report: its types, and its tag when it has one (`object (kind = "pix")`).
pub(super) fn branch_text(branch: &Value) -> String {
    let key = branch_key(branch);
    match key.split_once(':') {
        Some(("tag", tag)) => format!("{} ({})", summary(branch), tag.replacen('=', " = ", 1)),
        Some(("variant", name)) => format!("{} (variant {name})", summary(branch)),
        _ => summary(branch),
    }
}
