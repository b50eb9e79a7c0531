//! `enum` and `const`: the values a schema allows.

use super::*;

impl Walk {
    pub(super) fn values(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str) {
        match (allowed_values(old), allowed_values(new)) {
            (Some(old_values), Some(new_values)) => {
                if old.contains_key("const") && new.contains_key("const") {
                    if old_values != new_values {
                        self.push(
                            Rule::ConstChanged,
                            &format!("{at}/const"),
                            list(&old_values),
                            list(&new_values),
                            true,
                            true,
                        );
                    }
                    return;
                }
                for value in new_values.iter().filter(|v| !old_values.contains(v)) {
                    self.push(Rule::EnumValueAdded, &format!("{at}/enum"), "absent".into(), short(value), false, true);
                }
                for value in old_values.iter().filter(|v| !new_values.contains(v)) {
                    self.push(
                        Rule::EnumValueRemoved,
                        &format!("{at}/enum"),
                        short(value),
                        "absent".into(),
                        true,
                        false,
                    );
                }
            }
            (None, Some(new_values)) => {
                let at = format!("{at}/{}", if new.contains_key("const") { "const" } else { "enum" });
                self.push(Rule::EnumConstraintAdded, &at, "any value".into(), list(&new_values), true, false);
            }
            (Some(old_values), None) => {
                let at = format!("{at}/{}", if old.contains_key("const") { "const" } else { "enum" });
                self.push(Rule::EnumConstraintRemoved, &at, list(&old_values), "any value".into(), false, true);
            }
            (None, None) => {}
        }
    }
}

pub(super) fn allowed_values(map: &Map<String, Value>) -> Option<Vec<Value>> {
    if let Some(value) = map.get("const") {
        return Some(vec![value.clone()]);
    }
    let values = map.get("enum")?.as_array()?;
    Some(values.iter().filter(|v| !v.is_null()).cloned().collect())
}
