//! A borrowed view of the derive input: the struct, its fields and their parsed attributes, keeping the syn
//! nodes for error spans.

use syn::{Data, DeriveInput, Fields, Ident, Type};

use crate::attr::{self, Derive};
use crate::errors::Errors;
use crate::serde;

/// A struct with named fields, as the derives see it.
pub(crate) struct Input<'a> {
    pub(crate) node: &'a DeriveInput,
    pub(crate) attrs: attr::Container,
    pub(crate) serde: serde::Container,
    pub(crate) fields: Vec<Field<'a>>,
}

/// One named field.
pub(crate) struct Field<'a> {
    pub(crate) ident: &'a Ident,
    pub(crate) ty: &'a Type,
    pub(crate) attrs: attr::Field,
    pub(crate) serde: serde::Field,
}

impl<'a> Input<'a> {
    /// Reads `node`; `None` (with the error pushed) unless it is a struct with named fields.
    pub(crate) fn from_syn(derive: Derive, node: &'a DeriveInput, errors: &mut Errors) -> Option<Self> {
        let attrs = attr::container(derive, &node.attrs, errors);
        let named = match &node.data {
            Data::Struct(data) => match &data.fields {
                Fields::Named(named) => named,
                Fields::Unnamed(fields) => {
                    errors.push(syn::Error::new_spanned(
                        fields,
                        format!(
                            "{} needs a struct with named fields, not a tuple struct: the payload is a JSON object \
                             and each field is one of its properties; name the fields: `struct {} {{ ... }}`",
                            derive.name(),
                            node.ident
                        ),
                    ));
                    return None;
                }
                Fields::Unit => {
                    errors.push(syn::Error::new_spanned(
                        &node.ident,
                        format!(
                            "{} needs a struct with named fields, not a unit struct: the payload is a JSON object \
                             and each field is one of its properties",
                            derive.name()
                        ),
                    ));
                    return None;
                }
            },
            Data::Enum(data) => {
                let message = match derive {
                    Derive::Event => {
                        "#[derive(OutboxEvent)] works on structs with named fields, not on enums: an \
                                      event type has one payload shape; declare one event struct per variant"
                    }
                    Derive::Redact => {
                        "#[derive(Redact)] works on structs with named fields, not on enums (yet): \
                                       implement `outbox_core::Redact` by hand for this enum"
                    }
                };
                let (keyword, ident) = (&data.enum_token, &node.ident);
                errors.push(syn::Error::new_spanned(quote::quote!(#keyword #ident), message));
                return None;
            }
            Data::Union(data) => {
                let (keyword, ident) = (&data.union_token, &node.ident);
                errors.push(syn::Error::new_spanned(
                    quote::quote!(#keyword #ident),
                    format!("{} works on structs with named fields, not on unions", derive.name()),
                ));
                return None;
            }
        };
        let fields = named
            .named
            .iter()
            .filter_map(|field| {
                Some(Field {
                    ident: field.ident.as_ref()?,
                    ty: &field.ty,
                    attrs: attr::field(derive, &field.attrs, errors),
                    serde: serde::field(&field.attrs),
                })
            })
            .collect();
        Some(Self { node, attrs, serde: serde::container(&node.attrs), fields })
    }
}

impl Field<'_> {
    /// The field's key in the JSON object, as serde names it.
    pub(crate) fn json_name(&self, input: &Input<'_>) -> String {
        if let Some(name) = &self.serde.rename {
            return name.clone();
        }
        let name = self.ident.to_string();
        let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
        match input.serde.rename_all {
            Some(rule) => rule.apply_to_field(&name),
            None => name,
        }
    }

    /// The JSON pointer of the field's value, relative to the struct's: `""` when serde merges the field into
    /// the struct (`flatten`) or the struct is the field (`transparent`).
    pub(crate) fn pointer(&self, input: &Input<'_>) -> String {
        if self.serde.flatten || input.serde.transparent {
            String::new()
        } else {
            format!("/{}", self.json_name(input).replace('~', "~0").replace('/', "~1"))
        }
    }
}
