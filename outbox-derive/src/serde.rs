//! The `#[serde(...)]` attributes that move or hide a field in the JSON: `rename`, `rename_all`, `flatten`,
//! `skip`, `skip_serializing`, `transparent`, and `into`, which serializes another type in the struct's place. Everything else is left to serde, which also reports mistakes in
//! them, so this parser stays quiet.

use syn::Attribute;

use crate::attr::skip_value;
use crate::case::RenameRule;

/// The struct-level serde attributes that change field names or layout.
#[derive(Default)]
pub(crate) struct Container {
    pub(crate) rename_all: Option<RenameRule>,
    pub(crate) transparent: bool,
    /// `into = "..."`: the JSON is another type's, so the struct's fields do not say where their values land.
    pub(crate) into: Option<syn::Path>,
}

/// The field-level serde attributes that change where the field lands.
#[derive(Default)]
pub(crate) struct Field {
    pub(crate) rename: Option<String>,
    pub(crate) skip: bool,
    pub(crate) flatten: bool,
    /// `with` or `serialize_with`: the field is written by a function of the user's, in a shape its type's
    /// sensitive paths may not name.
    pub(crate) custom: bool,
}

fn serde_attrs(attrs: &[Attribute]) -> impl Iterator<Item = &Attribute> {
    attrs.iter().filter(|attr| attr.path().is_ident("serde"))
}

/// Reads the serde attributes of the struct.
pub(crate) fn container(attrs: &[Attribute]) -> Container {
    let mut container = Container::default();
    for attr in serde_attrs(attrs) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename_all") {
                if let Some(rule) = serialize_name(&meta)? {
                    container.rename_all = RenameRule::from_name(&rule);
                }
            } else if meta.path.is_ident("transparent") {
                container.transparent = true;
            } else if meta.path.is_ident("into") {
                container.into = Some(meta.path.clone());
                skip_value(&meta)?;
            } else {
                skip_value(&meta)?;
            }
            Ok(())
        });
    }
    container
}

/// Reads the serde attributes of one field.
pub(crate) fn field(attrs: &[Attribute]) -> Field {
    let mut field = Field::default();
    for attr in serde_attrs(attrs) {
        let _ = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if let Some(name) = serialize_name(&meta)? {
                    field.rename = Some(name);
                }
            } else if meta.path.is_ident("skip") || meta.path.is_ident("skip_serializing") {
                field.skip = true;
            } else if meta.path.is_ident("flatten") {
                field.flatten = true;
            } else if meta.path.is_ident("with") || meta.path.is_ident("serialize_with") {
                field.custom = true;
                skip_value(&meta)?;
            } else {
                skip_value(&meta)?;
            }
            Ok(())
        });
    }
    field
}

/// The serialize side of `key = "x"` or `key(serialize = "x", deserialize = "y")`.
fn serialize_name(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<Option<String>> {
    if meta.input.peek(syn::Token![=]) {
        let name: syn::LitStr = meta.value()?.parse()?;
        return Ok(Some(name.value()));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("serialize") {
            let lit: syn::LitStr = inner.value()?.parse()?;
            name = Some(lit.value());
        } else {
            skip_value(&inner)?;
        }
        Ok(())
    })?;
    Ok(name)
}
