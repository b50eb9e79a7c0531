//! Every string a user can write in an attribute (`aggregate_id = "..."`, `crate = "..."`, `upcast_from = "..."`,
//! the event type, serde renames) gives the derives' code or a compile error pointing at it, never a panic
//! ("proc-macro derive panicked"), and the output is always valid Rust.

use proc_macro2::{Span, TokenStream};
use proptest::prelude::*;
use quote::quote;
use syn::{parse_quote, DeriveInput, LitStr};

use crate::expand;

/// Dot-separated segments built from the pieces that identifiers, raw identifiers, method calls and paths are made
/// of (`r#` up to twice, keywords, `()`, `::`) and the characters that break them.
fn path_like() -> impl Strategy<Value = String> {
    let segment = r##"(r#){0,2}(self|Self|super|crate|type|_|kind|r|9lives|é|🦀| |a b|a"b|/\*|//|<T>|\\|\x00|::)?(kind)?(\(\)){0,2}"##;
    prop::collection::vec(segment, 1..4).prop_map(|segments| segments.join("."))
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![path_like(), "\\PC{0,24}", ".{0,12}"]
}

/// Checks an expansion: valid Rust, and a compile error exactly when `rejected` says there must be one (`None`:
/// either is fine).
fn check(output: &TokenStream, rejected: Option<bool>) {
    let file: syn::File = syn::parse2(output.clone()).unwrap_or_else(|error| panic!("{error}: {output}"));
    let text = quote!(#file).to_string();
    if let Some(rejected) = rejected {
        assert_eq!(text.contains("compile_error"), rejected, "{text}");
    }
}

fn event_with(attr: &TokenStream) -> DeriveInput {
    parse_quote! {
        #[outbox(event_type = "shape.drawn", aggregate = "shape", version = 2, #attr)]
        struct ShapeDrawn {
            #[serde(rename = "type")]
            r#type: String,
            kind: String,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn any_aggregate_id_path_is_code_or_a_compile_error(text in any_text()) {
        let lit = LitStr::new(&text, Span::call_site());
        check(&expand::derive_event(&event_with(&quote!(aggregate_id = #lit))), None);
    }

    #[test]
    fn any_crate_path_is_code_or_a_compile_error_in_each_derive(text in any_text()) {
        let lit = LitStr::new(&text, Span::call_site());
        let valid = syn::parse::Parser::parse_str(syn::Path::parse_mod_style, &text)
            .is_ok_and(|path| !path.segments.iter().any(|segment| segment.ident == "Self"));
        let mut node = event_with(&quote!(crate = #lit));
        node.attrs.push(parse_quote!(#[outbox(aggregate_id = "kind")]));
        check(&expand::derive_event(&node), Some(!valid));
        let nested: DeriveInput = parse_quote! {
            #[outbox(crate = #lit)]
            struct Card {
                #[outbox(sensitive)]
                number: String,
            }
        };
        check(&expand::derive_redact(&nested), Some(!valid));
        check(&expand::derive_redacted_debug(&nested), Some(!valid));
    }

    #[test]
    fn any_upcast_from_string_is_code_or_a_compile_error(text in any_text()) {
        let lit = LitStr::new(&text, Span::call_site());
        let valid = syn::parse_str::<syn::Path>(&text).is_ok();
        let mut node = event_with(&quote!(upcast_from = #lit));
        node.attrs.push(parse_quote!(#[outbox(aggregate_id = "kind")]));
        check(&expand::derive_event(&node), Some(!valid));
    }

    #[test]
    fn any_event_type_aggregate_or_serde_rename_is_code_or_a_compile_error(
        event_type in any_text(),
        aggregate in any_text(),
        rename in any_text(),
        rename_all in any_text(),
    ) {
        let (event_type, aggregate) =
            (LitStr::new(&event_type, Span::call_site()), LitStr::new(&aggregate, Span::call_site()));
        let (rename, rename_all) = (LitStr::new(&rename, Span::call_site()), LitStr::new(&rename_all, Span::call_site()));
        let node: DeriveInput = parse_quote! {
            #[outbox(event_type = #event_type, aggregate = #aggregate, version = 1)]
            #[serde(rename_all = #rename_all)]
            struct ShapeDrawn {
                #[outbox(aggregate_id)]
                #[serde(rename = #rename)]
                id: u64,
                #[outbox(sensitive)]
                #[serde(rename = #rename)]
                email: String,
            }
        };
        check(&expand::derive_event(&node), None);
        check(&expand::derive_redacted_debug(&node), None);
    }
}
