//! Checks across attributes: required keys, the event type's grammar, one aggregate id, the guards for secrets
//! and personal data.

use syn::ext::IdentExt;
use syn::{Ident, LitStr};

use crate::ast::{Field, Input};
use crate::errors::Errors;
use crate::sensitive_names::{classify, Finding};

/// The longest event type (or aggregate type) accepted.
const MAX_NAME_LEN: usize = 255;

/// An event's checked metadata.
pub(crate) struct Event<'a> {
    pub(crate) event_type: &'a LitStr,
    pub(crate) aggregate: &'a LitStr,
    pub(crate) version: u32,
    pub(crate) aggregate_id: AggregateId<'a>,
    /// The type of the version this one replaces (`upcast_from = ...`).
    pub(crate) upcast_from: Option<&'a syn::Path>,
}

/// Where the aggregate id comes from.
pub(crate) enum AggregateId<'a> {
    /// The field marked `#[outbox(aggregate_id)]`.
    Field(&'a Field<'a>),
    /// `aggregate_id = "customer.id"` or `aggregate_id = "key()"`: fields and methods from `self`.
    Path { steps: Vec<Step>, lit: &'a LitStr },
}

/// One step of an `aggregate_id = "..."` path.
pub(crate) enum Step {
    Field(Ident),
    Method(Ident),
}

/// Checks what `#[derive(OutboxEvent)]` needs; `None` when something required is missing or wrong (the errors
/// are pushed).
pub(crate) fn event<'a>(input: &'a Input<'a>, errors: &mut Errors) -> Option<Event<'a>> {
    fields(input, errors);
    let attrs = &input.attrs;
    let event_type = attrs.event_type.as_ref();
    if let Some(lit) = event_type {
        check_name(lit, "event type", "payment.paid", errors);
    }
    let aggregate = attrs.aggregate.as_ref();
    if let Some(lit) = aggregate {
        check_name(lit, "aggregate", "payment", errors);
    }
    let missing: Vec<&str> = [
        ("event_type", event_type.is_none()),
        ("aggregate", aggregate.is_none()),
        ("version", attrs.version.is_none()),
    ]
    .into_iter()
    .filter(|(key, missing)| *missing && !attrs.attempted.contains(key))
    .map(|(key, _)| key)
    .collect();
    if !missing.is_empty() {
        let keys: Vec<String> = missing.iter().map(|key| format!("`{key}`")).collect();
        let message = format!(
            "missing {}: #[derive(OutboxEvent)] needs the event's type, aggregate and schema version, e.g. \
             `#[outbox(event_type = \"payment.paid\", aggregate = \"payment\", version = 1)]`",
            match keys.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
                None => String::new(),
            }
        );
        errors.push(match &attrs.first {
            Some(attr) => syn::Error::new_spanned(attr, message),
            None => syn::Error::new_spanned(&input.node.ident, message),
        });
    }
    let version = match &attrs.version {
        Some(lit) => match lit.base10_parse::<u32>() {
            Ok(0) => {
                errors.push(syn::Error::new_spanned(lit, "version 0 is not valid: versions start at 1"));
                None
            }
            Ok(version) if version <= i32::MAX.unsigned_abs() => Some(version),
            _ => {
                errors.push(syn::Error::new_spanned(lit, "the version must be an integer from 1 to 2147483647"));
                None
            }
        },
        None => None,
    };
    let aggregate_id = aggregate_id(input, errors);
    let upcast_from = attrs.upcast_from.as_ref();
    if let (Some(path), Some(1)) = (upcast_from, version) {
        errors.push(syn::Error::new_spanned(
            path,
            "version 1 is the first version of an event type: it has nothing to upcast from; give this type the \
             next version (`version = 2`) or remove `upcast_from`",
        ));
        return None;
    }
    if let (Some(path), false) = (upcast_from, input.node.generics.params.is_empty()) {
        errors.push(syn::Error::new_spanned(
            path,
            "a generic event cannot upcast: it is not registered and has no single previous version",
        ));
        return None;
    }
    Some(Event {
        event_type: event_type?,
        aggregate: aggregate?,
        version: version?,
        aggregate_id: aggregate_id?,
        upcast_from,
    })
}

/// `event_type` and `aggregate`: lowercase, dot-separated segments of `[a-z0-9_-]`.
fn check_name(lit: &LitStr, what: &str, example: &str, errors: &mut Errors) {
    let name = lit.value();
    let rule = "use lowercase, dot-separated segments of `a-z`, `0-9`, `_` and `-`";
    let problem = if name.is_empty() {
        Some(format!("the {what} is empty"))
    } else if name.len() > MAX_NAME_LEN {
        Some(format!("the {what} is {} characters long, more than {MAX_NAME_LEN}", name.len()))
    } else if name.starts_with('.') || name.ends_with('.') {
        Some(format!("the {what} `{name}` starts or ends with a dot"))
    } else if name.contains("..") {
        Some(format!("the {what} `{name}` has an empty segment (`..`)"))
    } else {
        let bad = name.chars().find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-' | '.'));
        bad.map(|bad| format!("the {what} `{name}` contains {bad:?}"))
    };
    if let Some(problem) = problem {
        errors.push(syn::Error::new_spanned(lit, format!("invalid {what}: {problem}; {rule}, e.g. `{example}`")));
    }
}

fn aggregate_id<'a>(input: &'a Input<'a>, errors: &mut Errors) -> Option<AggregateId<'a>> {
    let marked: Vec<&Field<'_>> = input.fields.iter().filter(|field| field.attrs.aggregate_id.is_some()).collect();
    let container = input.attrs.aggregate_id.as_ref();
    if let (Some(lit), Some(field)) = (container, marked.first()) {
        errors.push(syn::Error::new_spanned(
            lit,
            format!(
                "the aggregate id is given twice: here and by `#[outbox(aggregate_id)]` on field `{}`; keep one",
                field.ident
            ),
        ));
        return None;
    }
    for extra in marked.iter().skip(1) {
        errors.push(syn::Error::new_spanned(
            extra.attrs.aggregate_id.as_ref(),
            format!(
                "only one field can be the aggregate id, and `{}` already is: an event is about one aggregate",
                marked[0].ident
            ),
        ));
    }
    if let Some(lit) = container {
        return aggregate_id_path(input, lit, errors);
    }
    match marked.first() {
        Some(field) if marked.len() == 1 => Some(AggregateId::Field(field)),
        Some(_) => None,
        None => {
            errors.push(syn::Error::new_spanned(
                &input.node.ident,
                "no aggregate id: mark the field that identifies the aggregate with `#[outbox(aggregate_id)]`, or \
                 name it on the struct with `#[outbox(aggregate_id = \"field.path\")]` (a method works too: \
                 `aggregate_id = \"key()\"`)",
            ));
            None
        }
    }
}

fn aggregate_id_path<'a>(input: &Input<'_>, lit: &'a LitStr, errors: &mut Errors) -> Option<AggregateId<'a>> {
    let text = lit.value();
    let mut steps = Vec::new();
    for segment in text.split('.') {
        let (name, method) = match segment.strip_suffix("()") {
            Some(name) => (name, true),
            None => (segment, false),
        };
        let ident = match step_ident(name, lit) {
            Ok(ident) => ident,
            Err(problem) => {
                errors.push(syn::Error::new_spanned(
                    lit,
                    format!(
                        "`{text}` is not a path to the aggregate id: {problem}; use field names and methods \
                         without arguments separated by dots, e.g. `\"customer.id\"` or `\"key()\"`"
                    ),
                ));
                return None;
            }
        };
        steps.push(if method { Step::Method(ident) } else { Step::Field(ident) });
    }
    if let Some(Step::Field(first)) = steps.first() {
        // `r#kind` and `kind` name the same field.
        if !input.fields.iter().any(|field| field.ident.unraw() == first.unraw()) {
            let names: Vec<String> = input.fields.iter().map(|field| format!("`{}`", field.ident)).collect();
            errors.push(syn::Error::new_spanned(
                lit,
                format!("`{first}` is not a field of `{}` (its fields: {})", input.node.ident, names.join(", ")),
            ));
            return None;
        }
        let marked =
            input.fields.iter().find(|field| field.ident.unraw() == first.unraw() && field.attrs.sensitive.is_some());
        if let Some(field) = marked {
            errors.push(syn::Error::new_spanned(
                lit,
                format!(
                    "the aggregate id cannot come from `{}`, a field marked sensitive: the aggregate id is stored and \
                     published in clear, to order and key the events; use an opaque identifier as the aggregate id",
                    field.ident
                ),
            ));
            return None;
        }
    }
    Some(AggregateId::Path { steps, lit })
}

/// The identifier of one step of an `aggregate_id = "..."` path, spanned at the attribute's literal; a raw
/// identifier (`r#type`) stays raw. The reason it is not a valid identifier otherwise.
///
/// The text is parsed by syn as one identifier token and then given the literal's span, so no string can make the
/// derive panic (building the identifier with `Ident::new_raw` from unchecked text would, e.g. for `r#r#type`).
fn step_ident(name: &str, lit: &LitStr) -> Result<Ident, String> {
    use syn::parse::Parser;
    if name.is_empty() {
        return Err("it has an empty segment".to_owned());
    }
    if let Some(raw) = name.strip_prefix("r#") {
        // The compiler refuses these as raw identifiers; asking its lexer about them is not needed.
        if matches!(raw, "self" | "Self" | "super" | "crate" | "_" | "") {
            return Err(format!("`{name}` is not a valid raw identifier"));
        }
        return match Ident::parse_any.parse_str(name) {
            Ok(mut ident) => {
                ident.set_span(lit.span());
                Ok(ident)
            }
            Err(_) => Err(format!("`{name}` is not a valid raw identifier")),
        };
    }
    match syn::parse_str::<Ident>(name) {
        Ok(mut ident) => {
            ident.set_span(lit.span());
            Ok(ident)
        }
        Err(_) => match Ident::parse_any.parse_str(name) {
            Ok(_) if matches!(name, "self" | "Self" | "super" | "crate" | "_") => {
                Err(format!("`{name}` cannot name a field or a method"))
            }
            Ok(_) => Err(format!("`{name}` is a keyword; a field named so is written `r#{name}`")),
            Err(_) => Err(format!("`{name}` is not an identifier")),
        },
    }
}

/// The checks on fields that both derives share.
pub(crate) fn fields(input: &Input<'_>, errors: &mut Errors) {
    if let Some(into) = &input.serde.into {
        errors.push(syn::Error::new_spanned(
            into,
            "`#[serde(into = \"...\")]` serializes another type in this struct's place, so the sensitive marks on \
             these fields would name places the JSON does not have; derive on the type serialized instead (the \
             `into` type), or serialize this struct itself",
        ));
    }
    for field in &input.fields {
        let attrs = &field.attrs;
        if let (Some(sensitive), Some(_)) = (&attrs.sensitive, &attrs.not_sensitive) {
            errors.push(syn::Error::new_spanned(
                sensitive,
                format!("field `{}` is marked both `sensitive` and `not_sensitive`; keep one", field.ident),
            ));
        }
        if let (Some(sensitive), Some(_)) = (&attrs.sensitive, &attrs.aggregate_id) {
            errors.push(syn::Error::new_spanned(
                sensitive,
                "the aggregate id cannot be sensitive: it is stored and published in clear, to order and key the \
                 events; use an opaque identifier as the aggregate id",
            ));
        }
        if let (Some(sensitive), true) = (&attrs.sensitive, field.serde.flatten) {
            errors.push(syn::Error::new_spanned(
                sensitive,
                "a `#[serde(flatten)]` field cannot be marked sensitive as a whole: its properties are merged into \
                 the parent; mark the sensitive fields inside its type (#[derive(Redact)])",
            ));
        }
        let unmarked = attrs.sensitive.is_none() && attrs.not_sensitive.is_none();
        if unmarked && !field.serde.skip {
            let finding =
                classify(&field.ident.to_string()).or_else(|| field.serde.rename.as_deref().and_then(classify));
            if let Some(finding) = finding {
                errors.push(syn::Error::new_spanned(field.ident, unmarked_message(field.ident, &finding)));
            }
        }
    }
}

/// Why an unmarked field whose name says it holds a secret or personal data is refused, and how to fix it.
fn unmarked_message(ident: &Ident, finding: &Finding) -> String {
    match finding {
        Finding::Secret(secret) => format!(
            "field `{ident}` looks like it holds a secret (`{secret}`): events are stored in the outbox and copied to \
             every consumer, so keep secrets out of them and publish an identifier instead (a key id, a token id, a \
             masked number); if the value must travel, mark it `#[outbox(sensitive)]` so it is redacted wherever \
             the toolkit prints it, or mark it `#[outbox(not_sensitive)]` if it holds no secret"
        ),
        Finding::PersonalData(kind) => format!(
            "field `{ident}` looks like personal data (`{kind}`): events are stored in the outbox and copied to \
             every consumer, and personal data must not show up in logs, CLI output or `Debug`; mark it \
             `#[outbox(sensitive)]` so it is redacted wherever the toolkit prints it and flagged `x-sensitive` in \
             the contract, or `#[outbox(not_sensitive)]` if it holds no personal data"
        ),
    }
}

#[cfg(test)]
mod tests {
    use proc_macro2::Span;
    use syn::{parse_quote, DeriveInput, LitStr};

    use super::event;
    use crate::ast::Input;
    use crate::attr::Derive;
    use crate::errors::Errors;

    /// The errors of `#[derive(OutboxEvent)]` on a struct with `r#type` and `kind` fields whose aggregate id is
    /// `aggregate_id = "<text>"`; checks that the event is refused exactly when there is an error.
    fn aggregate_id_errors(text: &str) -> Vec<String> {
        let lit = LitStr::new(text, Span::call_site());
        let node: DeriveInput = parse_quote! {
            #[outbox(event_type = "shape.drawn", aggregate = "shape", version = 1, aggregate_id = #lit)]
            struct ShapeDrawn {
                r#type: String,
                kind: String,
            }
        };
        let mut errors = Errors::new();
        let input = Input::from_syn(Derive::Event, &node, &mut errors).expect("a struct with named fields");
        let accepted = event(&input, &mut errors).is_some();
        let messages: Vec<String> =
            errors.check().map(|error| error.into_iter().map(|e| e.to_string()).collect()).unwrap_or_default();
        assert_eq!(accepted, messages.is_empty(), "{text:?}: {messages:?}");
        messages
    }

    #[test]
    fn raw_identifiers_and_plain_fields_name_the_aggregate_id() {
        for text in ["r#type", "kind", "kind.len()", "r#type.r#ref", "r#kind"] {
            assert_eq!(aggregate_id_errors(text), Vec::<String>::new(), "{text}");
        }
    }

    #[test]
    fn malformed_raw_identifiers_are_errors_at_the_attribute_and_not_panics() {
        let cases = [
            ("r#r#type", "`r#r#type` is not a valid raw identifier"),
            ("r##type", "`r##type` is not a valid raw identifier"),
            ("r#", "`r#` is not a valid raw identifier"),
            ("r#_", "`r#_` is not a valid raw identifier"),
            ("r#self", "`r#self` is not a valid raw identifier"),
            ("r#9lives", "`r#9lives` is not a valid raw identifier"),
            ("r#type r#kind", "`r#type r#kind` is not a valid raw identifier"),
            ("kind.r#r#ref()", "`r#r#ref` is not a valid raw identifier"),
            ("_", "`_` cannot name a field or a method"),
            ("self", "`self` cannot name a field or a method"),
            ("type", "`type` is a keyword; a field named so is written `r#type`"),
            ("kind..len()", "it has an empty segment"),
            ("a\"b", "`a\"b` is not an identifier"),
            ("/*", "`/*` is not an identifier"),
        ];
        for (text, problem) in cases {
            let messages = aggregate_id_errors(text);
            assert_eq!(messages.len(), 1, "{text}: {messages:?}");
            assert!(messages[0].contains(problem), "{text}: {}", messages[0]);
            assert!(messages[0].starts_with(&format!("`{text}` is not a path to the aggregate id")), "{}", messages[0]);
        }
    }
}
