//! Object keywords: `properties`, `required`, `additionalProperties` (or `unevaluatedProperties`, which schemars
//! gives an object that flattens an enum beside a map), `patternProperties` (a map with integer keys), and the null
//! or default that a tolerant reader reads a missing property as.

use super::*;

impl Walk {
    pub(super) fn objects(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str, depth: usize) {
        let (old_props, new_props) = (properties(old), properties(new));
        let (old_required, new_required) = (required(old), required(new));
        let (old_extra, new_extra) = (Extra::of(old), Extra::of(new));
        let mut names: BTreeSet<&str> = old_props.keys().map(String::as_str).collect();
        names.extend(new_props.keys().map(String::as_str));
        names.extend(old_required.iter().copied());
        names.extend(new_required.iter().copied());
        let any = Value::Bool(true);
        let model = self.model;

        for name in names {
            let pointer = format!("{at}/properties/{}", escape(name));
            let declared = |props: &Map<String, Value>, required: &BTreeSet<&str>, extra: &Extra<'_>| {
                props
                    .get(name)
                    .cloned()
                    .or_else(|| required.contains(name).then(|| extra.reads().unwrap_or(&any).clone()))
            };
            let old_schema = declared(old_props, &old_required, &old_extra);
            let new_schema = declared(new_props, &new_required, &new_extra);
            let (was_required, is_required) = (old_required.contains(name), new_required.contains(name));
            // A tolerant (serde) reader reads a missing value whose schema names null as `None`, and a missing
            // value with a `default` as that default: such a property is required of writers (serde writes it)
            // but not of the events a reader gets.
            let demands = |required: bool, schema: &Value| {
                required
                    && !(model == ContentModel::Tolerant
                        && (reads_missing_as_none(schema) || schema.get("default").is_some()))
            };
            match (old_schema, new_schema) {
                (None, None) => {}
                (None, Some(new_schema)) => {
                    // Backward: old writers never emit it, unless their schema let them emit undeclared properties.
                    let backward = demands(is_required, &new_schema)
                        || old_extra.writes(model).is_some_and(|extra| !fits(extra, &new_schema, model, depth));
                    // Forward: old readers see a property they do not declare.
                    let forward = old_extra.reads().is_none_or(|extra| !fits(&new_schema, extra, model, depth));
                    let rule = if is_required { Rule::RequiredPropertyAdded } else { Rule::OptionalPropertyAdded };
                    self.push(
                        rule,
                        &pointer,
                        "absent".into(),
                        property_text(&new_schema, is_required),
                        backward,
                        forward,
                    );
                }
                (Some(old_schema), None) => {
                    let backward = new_extra.reads().is_none_or(|extra| !fits(&old_schema, extra, model, depth));
                    let forward = demands(was_required, &old_schema)
                        || new_extra.writes(model).is_some_and(|extra| !fits(extra, &old_schema, model, depth));
                    let rule = if was_required { Rule::RequiredPropertyRemoved } else { Rule::OptionalPropertyRemoved };
                    self.push(
                        rule,
                        &pointer,
                        property_text(&old_schema, was_required),
                        "absent".into(),
                        backward,
                        forward,
                    );
                }
                (Some(old_schema), Some(new_schema)) => {
                    if !was_required && is_required {
                        let backward = demands(true, &new_schema);
                        self.push(
                            Rule::PropertyMadeRequired,
                            &pointer,
                            "optional".into(),
                            "required".into(),
                            backward,
                            false,
                        );
                    } else if was_required && !is_required {
                        let forward = demands(true, &old_schema);
                        self.push(
                            Rule::PropertyMadeOptional,
                            &pointer,
                            "required".into(),
                            "optional".into(),
                            false,
                            forward,
                        );
                    }
                    self.node(&old_schema, &new_schema, &pointer, depth + 1);
                }
            }
        }

        // Properties whose names match a pattern: each pattern's values compared as a property's, a pattern added
        // or removed as a map opened or closed to those names.
        let (old_patterns, new_patterns) = (patterns(old), patterns(new));
        let mut keys: BTreeSet<&str> = old_patterns.keys().map(String::as_str).collect();
        keys.extend(new_patterns.keys().map(String::as_str));
        for key in keys {
            let pointer = format!("{at}/patternProperties/{}", escape(key));
            match (old_patterns.get(key), new_patterns.get(key)) {
                (Some(old_schema), Some(new_schema)) => self.node(old_schema, new_schema, &pointer, depth + 1),
                (Some(old_schema), None) => {
                    let backward = new_extra.reads().is_none_or(|extra| !fits(old_schema, extra, model, depth));
                    let forward = new_extra.writes(model).is_some_and(|extra| !fits(extra, old_schema, model, depth));
                    let old_text = format!("map of {}", summary(old_schema));
                    self.push(Rule::AdditionalPropertiesClosed, &pointer, old_text, "absent".into(), backward, forward);
                }
                (None, Some(new_schema)) => {
                    let backward = old_extra.writes(model).is_some_and(|extra| !fits(extra, new_schema, model, depth));
                    let forward = old_extra.reads().is_none_or(|extra| !fits(new_schema, extra, model, depth));
                    let new_text = format!("map of {}", summary(new_schema));
                    self.push(Rule::AdditionalPropertiesOpened, &pointer, "absent".into(), new_text, backward, forward);
                }
                (None, None) => {}
            }
        }

        let pointer = format!("{at}/{}", Extra::keyword(old, new));
        match (&old_extra, &new_extra) {
            (Extra::Schema(old_schema), Extra::Schema(new_schema)) => {
                self.node(old_schema, new_schema, &pointer, depth + 1)
            }
            _ if old_extra.openness() == new_extra.openness() => {}
            _ => {
                let crosses = |writer: &Extra<'_>, reader: &Extra<'_>| match (writer.writes(model), reader.reads()) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(written), Some(read)) => !fits(written, read, model, depth),
                };
                let (backward, forward) = (crosses(&old_extra, &new_extra), crosses(&new_extra, &old_extra));
                let rule = if new_extra.openness() < old_extra.openness() {
                    Rule::AdditionalPropertiesClosed
                } else {
                    Rule::AdditionalPropertiesOpened
                };
                self.push(rule, &pointer, old_extra.text(), new_extra.text(), backward, forward);
            }
        }
    }
}

/// What an object schema says about properties it does not declare.
pub(super) enum Extra<'v> {
    /// No `additionalProperties`.
    Absent,
    /// `additionalProperties: false`.
    Closed,
    /// `additionalProperties: true`.
    Open,
    /// `additionalProperties: {...}`: a map whose values follow the schema.
    Schema(&'v Value),
}

pub(super) static ANY: Value = Value::Bool(true);

impl<'v> Extra<'v> {
    /// The keyword that says it in `old` or `new`: `additionalProperties`, or `unevaluatedProperties` alone.
    fn keyword(old: &Map<String, Value>, new: &Map<String, Value>) -> &'static str {
        let unevaluated_only = |map: &Map<String, Value>| {
            map.contains_key("unevaluatedProperties") && !map.contains_key("additionalProperties")
        };
        if unevaluated_only(old) || unevaluated_only(new) {
            "unevaluatedProperties"
        } else {
            "additionalProperties"
        }
    }

    fn of(map: &'v Map<String, Value>) -> Self {
        match map.get("additionalProperties").or_else(|| map.get("unevaluatedProperties")) {
            None => Extra::Absent,
            Some(Value::Bool(false)) => Extra::Closed,
            Some(Value::Bool(true)) => Extra::Open,
            Some(schema) if as_map(schema).is_some_and(|m| m.keys().all(|k| ANNOTATIONS.contains(&k.as_str()))) => {
                Extra::Open
            }
            Some(schema) => Extra::Schema(schema),
        }
    }

    /// What undeclared properties a writer of this schema may emit; `None` when it emits none.
    fn writes(&self, model: ContentModel) -> Option<&'v Value> {
        match (self, model) {
            (Extra::Closed, _) | (Extra::Absent, ContentModel::Tolerant) => None,
            (Extra::Open, _) | (Extra::Absent, ContentModel::Strict) => Some(&ANY),
            (Extra::Schema(schema), _) => Some(schema),
        }
    }

    /// What undeclared properties a reader of this schema accepts; `None` when it rejects them.
    fn reads(&self) -> Option<&'v Value> {
        match self {
            Extra::Closed => None,
            Extra::Open | Extra::Absent => Some(&ANY),
            Extra::Schema(schema) => Some(schema),
        }
    }

    /// 0 closed, 1 a map of some schema, 2 open.
    fn openness(&self) -> u8 {
        match self {
            Extra::Closed => 0,
            Extra::Schema(_) => 1,
            Extra::Open | Extra::Absent => 2,
        }
    }

    fn text(&self) -> String {
        match self {
            Extra::Absent => "open".to_owned(),
            Extra::Closed => "closed".to_owned(),
            Extra::Open => "additionalProperties true".to_owned(),
            Extra::Schema(schema) => format!("map of {}", summary(schema)),
        }
    }
}

/// Whether a tolerant (serde) reader reads the property missing as `None`: its schema names `null` (an
/// `Option<T>`). A schema that accepts any value (`true`, what a `serde_json::Value` gets) does not count: serde
/// reads a missing `Value` as an error.
pub(super) fn reads_missing_as_none(schema: &Value) -> bool {
    names_null(schema)
}

pub(super) fn property_text(schema: &Value, required: bool) -> String {
    format!("{} ({})", summary(schema), if required { "required" } else { "optional" })
}

pub(super) fn properties(map: &Map<String, Value>) -> &Map<String, Value> {
    map.get("properties").and_then(Value::as_object).unwrap_or(&*EMPTY)
}

fn patterns(map: &Map<String, Value>) -> &Map<String, Value> {
    map.get("patternProperties").and_then(Value::as_object).unwrap_or(&*EMPTY)
}

pub(super) fn required(map: &Map<String, Value>) -> BTreeSet<&str> {
    map.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect()
}
