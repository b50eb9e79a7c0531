//! `#[outbox(...)]` attributes, parsed into typed values that keep their tokens for error spans.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Lit, LitInt, LitStr, Token};

use crate::errors::Errors;

/// Which derive is reading the attributes: they accept different keys.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Derive {
    /// `#[derive(OutboxEvent)]`.
    Event,
    /// `#[derive(Redact)]`.
    Redact,
}

impl Derive {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Event => "#[derive(OutboxEvent)]",
            Self::Redact => "#[derive(Redact)]",
        }
    }

    fn container_keys(self) -> &'static [&'static str] {
        match self {
            Self::Event => &["event_type", "aggregate", "version", "aggregate_id", "upcast_from", "crate"],
            Self::Redact => &["crate"],
        }
    }

    fn field_keys(self) -> &'static [&'static str] {
        match self {
            Self::Event => &["aggregate_id", "sensitive", "not_sensitive"],
            Self::Redact => &["sensitive", "not_sensitive"],
        }
    }
}

/// The struct-level attributes.
#[derive(Default)]
pub(crate) struct Container {
    /// The first `#[outbox(...)]` attribute, to point at when a required key is missing.
    pub(crate) first: Option<Attribute>,
    pub(crate) event_type: Option<LitStr>,
    pub(crate) aggregate: Option<LitStr>,
    pub(crate) version: Option<LitInt>,
    pub(crate) aggregate_id: Option<LitStr>,
    pub(crate) krate: Option<syn::Path>,
    /// `upcast_from = PaymentPaidV1`: the type of the version this one replaces.
    pub(crate) upcast_from: Option<syn::Path>,
    /// Keys the user tried to give but got wrong (a bad value, a typo): not reported again as missing.
    pub(crate) attempted: Vec<&'static str>,
}

/// The field-level attributes; each flag keeps the token that set it.
#[derive(Default)]
pub(crate) struct Field {
    pub(crate) aggregate_id: Option<syn::Path>,
    pub(crate) sensitive: Option<syn::Path>,
    pub(crate) not_sensitive: Option<syn::Path>,
}

fn outbox_attrs(attrs: &[Attribute]) -> impl Iterator<Item = &Attribute> {
    attrs.iter().filter(|attr| attr.path().is_ident("outbox"))
}

/// Parses the `#[outbox(...)]` attributes of the struct.
pub(crate) fn container(derive: Derive, attrs: &[Attribute], errors: &mut Errors) -> Container {
    let mut container = Container::default();
    for attr in outbox_attrs(attrs) {
        container.first.get_or_insert_with(|| attr.clone());
        let parsed = attr.parse_nested_meta(|meta| {
            let key = key_of(&meta);
            if !derive.container_keys().contains(&key.as_str()) {
                errors.push(unknown_key(derive, &meta, &key, Place::Container));
                container.attempted.extend(closest(&key, derive.container_keys()));
                return skip_value(&meta);
            }
            let before = errors.count();
            match key.as_str() {
                "event_type" => set(&mut container.event_type, string(&meta, errors)?, &meta, errors),
                "aggregate" => set(&mut container.aggregate, string(&meta, errors)?, &meta, errors),
                "aggregate_id" => set(&mut container.aggregate_id, string(&meta, errors)?, &meta, errors),
                "version" => set(&mut container.version, integer(&meta, errors)?, &meta, errors),
                "upcast_from" => set(&mut container.upcast_from, type_path(&meta, errors)?, &meta, errors),
                _ => {
                    set(&mut container.krate, crate_path(&meta, errors)?, &meta, errors);
                }
            }
            if errors.count() > before {
                container.attempted.extend(derive.container_keys().iter().find(|known| **known == key));
            }
            Ok(())
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    container
}

/// The `crate = "..."` of the struct's `#[outbox(...)]` attributes, for a derive that reads nothing else; the
/// other keys are left to `#[derive(OutboxEvent)]` or `#[derive(Redact)]`, which report mistakes in them.
pub(crate) fn krate_only(attrs: &[Attribute], errors: &mut Errors) -> Option<syn::Path> {
    let mut krate = None;
    for attr in outbox_attrs(attrs) {
        let parsed = attr.parse_nested_meta(|meta| {
            if !meta.path.is_ident("crate") {
                return skip_value(&meta);
            }
            if let Some(path) = crate_path(&meta, errors)? {
                krate = Some(path);
            }
            Ok(())
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    krate
}

/// `crate = "my_app::outbox_core"`, or the path unquoted (`crate = my_app::outbox_core`, which a `$krate:path`
/// passed through `macro_rules!` is): a module path (`::outbox_core`, `crate::reexports` too), as the generated
/// code writes `use <path>::__private::...`. Anything else (`Self`, generic arguments, text that is no path) is
/// reported at the value and gives `None`.
fn crate_path(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<syn::Path>> {
    let path = match path_value(meta, "crate", "\"my_app::outbox_core\"", errors)? {
        None => return Ok(None),
        Some(Ok(path))
            if path.segments.iter().all(|segment| segment.arguments.is_none() && segment.ident != "Self") =>
        {
            return Ok(Some(path))
        }
        Some(Ok(path)) => path.into_token_stream(),
        Some(Err(tokens)) => tokens,
    };
    errors.push(syn::Error::new_spanned(
        path,
        "`crate` must name a path to outbox_core, e.g. `crate = \"my_app::outbox_core\"`",
    ));
    Ok(None)
}

/// Parses the `#[outbox(...)]` attributes of one field.
pub(crate) fn field(derive: Derive, attrs: &[Attribute], errors: &mut Errors) -> Field {
    let mut field = Field::default();
    for attr in outbox_attrs(attrs) {
        let parsed = attr.parse_nested_meta(|meta| {
            let key = key_of(&meta);
            if !derive.field_keys().contains(&key.as_str()) {
                errors.push(unknown_key(derive, &meta, &key, Place::Field));
                return skip_value(&meta);
            }
            if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    format!("`{key}` takes no value: write `#[outbox({key})]`"),
                ));
                skip_value(&meta)?;
            }
            let flag = Some(meta.path.clone());
            match key.as_str() {
                "aggregate_id" => set(&mut field.aggregate_id, flag, &meta, errors),
                "sensitive" => set(&mut field.sensitive, flag, &meta, errors),
                _ => set(&mut field.not_sensitive, flag, &meta, errors),
            }
            Ok(())
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    field
}

fn key_of(meta: &ParseNestedMeta<'_>) -> String {
    if meta.path.is_ident("crate") {
        return "crate".to_owned();
    }
    let path = &meta.path;
    path.get_ident().map(ToString::to_string).unwrap_or_else(|| quote::quote!(#path).to_string().replace(' ', ""))
}

/// Stores `value` unless the key was already given.
fn set<T>(slot: &mut Option<T>, value: Option<T>, meta: &ParseNestedMeta<'_>, errors: &mut Errors) {
    let Some(value) = value else { return };
    if slot.is_some() {
        let key = key_of(meta);
        errors.push(syn::Error::new_spanned(&meta.path, format!("duplicate `{key}` attribute: give it once")));
    } else {
        *slot = Some(value);
    }
}

/// `key = "text"`; a value of another kind is reported and gives `None`.
fn string(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<LitStr>> {
    let key = key_of(meta);
    match value(meta, &key, errors)? {
        Some(Lit::Str(lit)) => Ok(Some(lit)),
        Some(other) => {
            errors.push(syn::Error::new_spanned(other, format!("`{key}` takes a string: `{key} = \"...\"`")));
            Ok(None)
        }
        None => Ok(None),
    }
}

/// `key = path::To::Type` (a `"string"` holding one is accepted too); anything else is reported and gives `None`.
fn type_path(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<syn::Path>> {
    let key = key_of(meta);
    Ok(match path_value(meta, &key, "PaymentPaidV1", errors)? {
        Some(Ok(path)) => Some(path),
        Some(Err(tokens)) => {
            errors.push(syn::Error::new_spanned(
                tokens,
                format!("`{key}` takes the type of the previous version: `{key} = PaymentPaidV1`"),
            ));
            None
        }
        None => None,
    })
}

/// The value of a key that takes a path: `key = a::b::C`, also as a `$x:path` or `$x:ty` fragment of a
/// `macro_rules!`, or `key = "a::b::C"`. `Ok` with the path, `Err` with the value's tokens (to point at) when it is
/// no path, `None` (reported) when there is no value. A value that is not even a type is skipped up to the next
/// key, so that the keys after it are still read.
fn path_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Result<syn::Path, TokenStream>>> {
    use syn::parse::discouraged::Speculative;
    if !meta.input.peek(Token![=]) {
        errors.push(syn::Error::new_spanned(&meta.path, format!("`{key}` needs a value: `{key} = {example}`")));
        skip_value(meta)?;
        return Ok(None);
    }
    let input = meta.value()?;
    if input.peek(LitStr) {
        let lit: LitStr = input.parse()?;
        return Ok(Some(lit.parse::<syn::Path>().map_err(|_| lit.to_token_stream())));
    }
    // A type first, as its generic arguments may hold commas.
    let fork = input.fork();
    if let Ok(ty) = fork.parse::<syn::Type>() {
        if fork.is_empty() || fork.peek(Token![,]) {
            input.advance_to(&fork);
            return Ok(Some(path_of(ty)));
        }
    }
    let mut tokens = TokenStream::new();
    while !input.is_empty() && !input.peek(Token![,]) {
        tokens.extend([input.parse::<proc_macro2::TokenTree>()?]);
    }
    if tokens.is_empty() {
        errors.push(syn::Error::new_spanned(&meta.path, format!("`{key}` needs a value: `{key} = {example}`")));
        return Ok(None);
    }
    Ok(Some(Err(tokens)))
}

/// The path a type is, seen through the invisible groups of `macro_rules!` fragments; its tokens otherwise.
fn path_of(ty: syn::Type) -> Result<syn::Path, TokenStream> {
    match ty {
        syn::Type::Group(group) => path_of(*group.elem),
        syn::Type::Path(syn::TypePath { qself: None, path }) => Ok(path),
        other => Err(other.into_token_stream()),
    }
}

/// `key = 1`; a value of another kind is reported and gives `None`.
fn integer(meta: &ParseNestedMeta<'_>, errors: &mut Errors) -> syn::Result<Option<LitInt>> {
    let key = key_of(meta);
    match value(meta, &key, errors)? {
        Some(Lit::Int(lit)) => Ok(Some(lit)),
        Some(other) => {
            errors.push(syn::Error::new_spanned(other, format!("`{key}` takes an integer: `{key} = 1`")));
            Ok(None)
        }
        None => Ok(None),
    }
}

/// The expression after `key =`; a missing value is reported (with `example`) and gives `None`.
fn expr_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    example: &str,
    errors: &mut Errors,
) -> syn::Result<Option<syn::Expr>> {
    if !meta.input.peek(Token![=]) {
        errors.push(syn::Error::new_spanned(&meta.path, format!("`{key}` needs a value: `{key} = {example}`")));
        skip_value(meta)?;
        return Ok(None);
    }
    let mut expr: syn::Expr = meta.value()?.parse()?;
    // A `$value:literal` passed through `macro_rules!` arrives wrapped in an invisible group.
    while let syn::Expr::Group(group) = expr {
        expr = *group.expr;
    }
    Ok(Some(expr))
}

fn value(meta: &ParseNestedMeta<'_>, key: &str, errors: &mut Errors) -> syn::Result<Option<Lit>> {
    let Some(expr) = expr_value(meta, key, "...", errors)? else { return Ok(None) };
    match expr {
        syn::Expr::Lit(syn::ExprLit { lit, .. }) => Ok(Some(lit)),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{key}` takes a literal: `{key} = \"...\"` or `{key} = 1`"),
            ));
            Ok(None)
        }
    }
}

/// Consumes the value of a key that was rejected, so parsing goes on with the next key.
pub(crate) fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        let _: syn::Expr = meta.value()?.parse()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _: proc_macro2::TokenTree = meta.input.parse()?;
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Container,
    Field,
}

fn unknown_key(derive: Derive, meta: &ParseNestedMeta<'_>, key: &str, place: Place) -> syn::Error {
    let (here, there) = match place {
        Place::Container => (derive.container_keys(), derive.field_keys()),
        Place::Field => (derive.field_keys(), derive.container_keys()),
    };
    let span = meta.path.span();
    let message = if there.contains(&key) {
        match place {
            Place::Container => {
                format!("`{key}` goes on a field, not on the struct: `#[outbox({key})]` above the field")
            }
            Place::Field => {
                format!("`{key}` goes on the struct, not on a field: `#[outbox({key} = ...)]` above `struct`")
            }
        }
    } else if derive == Derive::Redact && key == "aggregate_id" {
        // Before the check below, which would say `crate` is all it takes on the struct, also of a field's mark.
        "`aggregate_id` is for #[derive(OutboxEvent)]: a nested type has no aggregate id".to_owned()
    } else if derive == Derive::Redact && Derive::Event.container_keys().contains(&key) {
        format!("`{key}` is for #[derive(OutboxEvent)]; #[derive(Redact)] marks the fields of a nested type and takes only `crate` on the struct")
    } else {
        let expected = here.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        match closest(key, here) {
            Some(guess) => {
                format!("unknown outbox attribute `{key}`: did you mean `{guess}`? (expected one of {expected})")
            }
            None => format!("unknown outbox attribute `{key}` (expected one of {expected})"),
        }
    };
    syn::Error::new(span, message)
}

/// The known key nearest to `key`, if it is near enough to be a typo.
fn closest(key: &str, known: &[&'static str]) -> Option<&'static str> {
    known
        .iter()
        .map(|candidate| (distance(key, candidate), *candidate))
        .filter(|(distance, candidate)| *distance <= (candidate.len() / 3).max(1))
        .min()
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn typos_get_a_suggestion_and_unrelated_words_do_not() {
        let keys = &["event_type", "aggregate", "version", "aggregate_id", "crate"];
        assert_eq!(closest("event_typ", keys), Some("event_type"));
        assert_eq!(closest("evnt_type", keys), Some("event_type"));
        assert_eq!(closest("aggregat", keys), Some("aggregate"));
        assert_eq!(closest("verison", keys), Some("version"));
        assert_eq!(closest("colour", keys), None);
    }
}
