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
        let new_keys: Vec<String> = new_branches.iter().map(branch_key).collect();
        let mut paired = vec![false; new_branches.len()];
        for (index, branch) in old_branches.iter().enumerate() {
            let key = branch_key(branch);
            let at_old = pointer(old_keyword, index);
            match (0..new_branches.len()).find(|&j| !paired[j] && new_keys[j] == key) {
                Some(j) => {
                    paired[j] = true;
                    self.sensitivity(is_sensitive(branch), is_sensitive(&new_branches[j]), &at_old);
                    self.single(branch, &new_branches[j], &at_old, depth + 1);
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

/// The alternatives of a schema with `null` split off: `(branches, accepts null)`. Nested unions are flattened,
/// `allOf` is merged, a `null` in a `type` list or a `{ "type": "null" }` branch becomes the flag.
pub(super) fn branches(value: &Value) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut nullable = false;
    collect_branches(value, &mut out, &mut nullable, 0);
    if out.iter().any(|b| matches!(b, Value::Bool(true))) {
        nullable = true;
    }
    (out, nullable)
}

pub(super) fn collect_branches(value: &Value, out: &mut Vec<Value>, nullable: &mut bool, depth: usize) {
    if let Some(keyword) = union_keyword(value).filter(|_| depth < 8) {
        for branch in value[keyword].as_array().into_iter().flatten() {
            collect_branches(branch, out, nullable, depth + 1);
        }
        return;
    }
    let value = merge_all_of(value);
    let Value::Object(mut map) = value else {
        if value == Value::Bool(true) {
            *nullable = true;
        }
        if value != Value::Bool(false) || out.is_empty() {
            out.push(value);
        }
        return;
    };
    let types = types_of(&map);
    if types == NULL {
        *nullable = true;
        return;
    }
    if types & NULL != 0 {
        *nullable = true;
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

pub(super) fn merge_all_of(value: &Value) -> Value {
    let Some(map) = value.as_object() else { return value.clone() };
    let Some(parts) = map.get("allOf").and_then(Value::as_array) else { return value.clone() };
    let mut merged = map.clone();
    merged.remove("allOf");
    for part in parts.iter().filter_map(Value::as_object) {
        for (key, part_value) in part {
            match (merged.get_mut(key), part_value) {
                (Some(Value::Object(props)), Value::Object(more)) if key == "properties" => {
                    for (name, schema) in more {
                        props.entry(name.clone()).or_insert_with(|| schema.clone());
                    }
                }
                (Some(Value::Array(names)), Value::Array(more)) if key == "required" => {
                    for name in more {
                        if !names.contains(name) {
                            names.push(name.clone());
                        }
                    }
                }
                (Some(_), _) => {}
                (None, _) => {
                    merged.insert(key.clone(), part_value.clone());
                }
            }
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

/// A branch in a report: its types, and its tag when it has one (`object (kind = "pix")`).
pub(super) fn branch_text(branch: &Value) -> String {
    let key = branch_key(branch);
    match key.split_once(':') {
        Some(("tag", tag)) => format!("{} ({})", summary(branch), tag.replacen('=', " = ", 1)),
        Some(("variant", name)) => format!("{} (variant {name})", summary(branch)),
        _ => summary(branch),
    }
}
