//! Code generation: the `Redact` and `OutboxEvent` impls and the registration of the event.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{DeriveInput, Ident, Type, WherePredicate};

use crate::ast::{Field, Input};
use crate::attr::Derive;
use crate::errors::Errors;
use crate::fallback;
use crate::valid::{self, AggregateId, Step};

/// `#[derive(OutboxEvent)]`.
pub(crate) fn derive_event(node: &DeriveInput) -> TokenStream {
    let mut errors = Errors::new();
    let input = Input::from_syn(Derive::Event, node, &mut errors);
    let event = input.as_ref().and_then(|input| valid::event(input, &mut errors));
    let krate = krate(input.as_ref());
    match (&input, event, errors.check()) {
        (Some(input), Some(event), None) => {
            let redact = redact_impl(input, &krate);
            let versioned = versioned_impl(input, &event, &krate);
            let event = event_impl(input, &event, &krate);
            let registration = registration(input, &krate);
            quote! {
                const _: () = {
                    #redact
                    #event
                    #versioned
                    #registration
                };
            }
        }
        (_, _, error) => fallback::event(node, &krate, error),
    }
}

/// `#[derive(Redact)]`.
pub(crate) fn derive_redact(node: &DeriveInput) -> TokenStream {
    let mut errors = Errors::new();
    let input = Input::from_syn(Derive::Redact, node, &mut errors);
    if let Some(input) = &input {
        valid::fields(input, &mut errors);
    }
    let krate = krate(input.as_ref());
    match (input, errors.check()) {
        (Some(input), None) => {
            let redact = redact_impl(&input, &krate);
            quote! {
                const _: () = {
                    #redact
                };
            }
        }
        (_, error) => fallback::redact(node, &krate, error),
    }
}

/// The path to outbox_core: `#[outbox(crate = "...")]` or `::outbox_core`.
fn krate(input: Option<&Input<'_>>) -> syn::Path {
    input.and_then(|input| input.attrs.krate.clone()).unwrap_or_else(|| syn::parse_quote!(::outbox_core))
}

/// The fields that appear in the JSON.
fn serialized<'a>(input: &'a Input<'a>) -> impl Iterator<Item = &'a Field<'a>> {
    input.fields.iter().filter(|field| !field.serde.skip)
}

/// Whether `ty` names one of the struct's type parameters.
fn is_generic(input: &Input<'_>, ty: &Type) -> bool {
    let params: Vec<&Ident> = input.node.generics.type_params().map(|param| &param.ident).collect();
    !params.is_empty() && mentions(ty.to_token_stream(), &params)
}

fn mentions(tokens: TokenStream, idents: &[&Ident]) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => idents.contains(&&ident),
        proc_macro2::TokenTree::Group(group) => mentions(group.stream(), idents),
        _ => false,
    })
}

/// `Field: Redact` for every serialized, not sensitive field whose type names a type parameter; for a field whose
/// type names the struct itself (`children: Vec<Tree<T>>`), `T: Redact` for each parameter it names instead (the
/// field's own bound would have the compiler prove `Tree<T>: Redact` to prove `Tree<T>: Redact`).
fn redact_bounds(input: &Input<'_>, krate: &syn::Path) -> Vec<WherePredicate> {
    let own = [&input.node.ident, &Ident::new("Self", proc_macro2::Span::call_site())];
    let mut bounds: Vec<WherePredicate> = Vec::new();
    for field in serialized(input).filter(|field| field.attrs.sensitive.is_none() && is_generic(input, field.ty)) {
        let ty = field.ty;
        if !mentions(ty.to_token_stream(), &own) {
            bounds.push(syn::parse_quote_spanned!(ty.span()=> #ty: #krate::__private::Redact));
            continue;
        }
        for param in input.node.generics.type_params().map(|param| &param.ident) {
            if mentions(ty.to_token_stream(), &[param]) {
                let bound: WherePredicate = syn::parse_quote_spanned!(ty.span()=> #param: #krate::__private::Redact);
                if !bounds.contains(&bound) {
                    bounds.push(bound);
                }
            }
        }
    }
    bounds
}

fn with_bounds(input: &Input<'_>, bounds: Vec<WherePredicate>) -> syn::Generics {
    let mut generics = input.node.generics.clone();
    if !bounds.is_empty() {
        generics.make_where_clause().predicates.extend(bounds);
    }
    generics
}

fn redact_impl(input: &Input<'_>, krate: &syn::Path) -> TokenStream {
    let ident = &input.node.ident;
    let generics = with_bounds(input, redact_bounds(input, krate));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let private = quote!(#krate::__private);
    // One identifier for every use, so the local resolves even when the derive runs inside a `macro_rules!`
    // (the `quote_spanned!` below would otherwise give some uses the hygiene of the user's type).
    let paths = quote::format_ident!("__outbox_paths");
    let pushes = serialized(input).map(|field| {
        let pointer = field.pointer(input);
        let ty = field.ty;
        if field.attrs.sensitive.is_some() {
            return quote! { #paths.push(#private::String::from(#pointer)); };
        }
        let inner = if is_generic(input, ty) {
            quote_spanned! {ty.span()=> <#ty as #private::Redact>::redact_paths() }
        } else {
            quote_spanned! {ty.span()=>
                {
                    #[allow(unused_imports)]
                    use #private::{Opaque as _, RedactNotForTheseArguments as _, ViaRedact as _};
                    (&&#private::Probe::<#ty>::new()).redact_paths()
                }
            }
        };
        if field.serde.custom {
            // Written by the user's function, in a shape the type's pointers may not name: the whole value is
            // redacted when the type has anything sensitive.
            quote! {
                if !#inner.is_empty() {
                    #paths.push(#private::String::from(#pointer));
                }
            }
        } else {
            quote! { #paths.extend(#private::prefixed(#pointer, #inner)); }
        }
    });
    let (own_impl_generics, own_ty_generics, own_where_clause) = input.node.generics.split_for_impl();
    quote! {
        #[automatically_derived]
        impl #own_impl_generics #private::DerivedRedact for #ident #own_ty_generics #own_where_clause {}

        #[automatically_derived]
        impl #impl_generics #private::Redact for #ident #ty_generics #where_clause {
            fn redact_paths() -> #private::Vec<#private::String> {
                #private::recursion_guarded::<Self>(|| {
                    #[allow(unused_mut)]
                    let mut #paths = #private::Vec::new();
                    #(#pushes)*
                    #paths
                })
            }
        }
    }
}

fn event_impl(input: &Input<'_>, event: &valid::Event<'_>, krate: &syn::Path) -> TokenStream {
    let ident = &input.node.ident;
    let private = quote!(#krate::__private);
    let mut bounds = redact_bounds(input, krate);
    if input.node.generics.type_params().next().is_some() {
        let (_, ty_generics, _) = input.node.generics.split_for_impl();
        bounds.push(syn::parse_quote!(#ident #ty_generics: #private::Serialize));
    }
    // `self` takes the macro's own span, as the `&self` receiver below does: with the span of the user's tokens
    // it would not resolve when those tokens come from a `macro_rules!` fragment (E0424). The value is bound to a
    // local first, so that the trait bound is checked on a token of the user's field (or attribute) and a
    // compile error points there rather than at the derive.
    let this = quote!(self);
    let id_expr = match &event.aggregate_id {
        AggregateId::Field(field) => {
            let name = field.ident;
            let ty = field.ty;
            if is_generic(input, ty) {
                bounds.push(syn::parse_quote_spanned!(ty.span()=> #ty: #private::AggregateId));
            }
            let value = Ident::new("__outbox_aggregate_id", ty.span());
            quote_spanned! {ty.span()=>
                let #value = &#this.#name;
                #private::AggregateId::to_aggregate_id(#value)
            }
        }
        AggregateId::Path { steps, lit } => {
            let steps = steps.iter().map(|step| match step {
                Step::Field(name) => quote!(.#name),
                Step::Method(name) => quote!(.#name()),
            });
            let value = Ident::new("__outbox_aggregate_id", lit.span());
            quote_spanned! {lit.span()=>
                let #value = &#this #(#steps)*;
                #private::AggregateId::to_aggregate_id(#value)
            }
        }
    };
    let generics = with_bounds(input, bounds);
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    let (event_type, aggregate, version) = (event.event_type, event.aggregate, event.version);
    quote! {
        #[automatically_derived]
        impl #impl_generics #private::OutboxEvent for #ident #ty_generics #where_clause {
            const EVENT_TYPE: &'static str = #event_type;
            const AGGREGATE_TYPE: &'static str = #aggregate;
            const VERSION: u32 = #version;

            fn aggregate_id(&self) -> #private::String {
                #id_expr
            }

            fn sensitive_paths() -> #private::Vec<#private::String> {
                <Self as #private::Redact>::redact_paths()
            }
        }
    }
}

/// `Versioned`: the version this one replaces (`upcast_from = P`, checked to be an older version of the same
/// event type at compile time), or none.
fn versioned_impl(input: &Input<'_>, event: &valid::Event<'_>, krate: &syn::Path) -> TokenStream {
    let ident = &input.node.ident;
    let private = quote!(#krate::__private);
    // The bounds the `OutboxEvent` impl of a generic event has, without repeating them.
    let mut generics = input.node.generics.clone();
    generics.make_where_clause().predicates.push(syn::parse_quote!(Self: #private::OutboxEvent));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // Every token takes the span of the `upcast_from` value, so that a missing `From` impl or a version that is
    // not older points there.
    let Some(previous) = event.upcast_from else {
        return quote! {
            #[automatically_derived]
            impl #impl_generics #private::Versioned for #ident #ty_generics #where_clause {
                type Previous = #private::NoPrevious;
            }
        };
    };
    respan(
        quote! {
            #[automatically_derived]
            impl #impl_generics #private::Versioned for #ident #ty_generics #where_clause {
                type Previous = #private::UpcastFrom<#previous>;
            }
            const _: () = #private::check_upcast::<#ident, #previous>();
        },
        previous.span(),
    )
}

/// `tokens` with every span set to `span`.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|token| match token {
            proc_macro2::TokenTree::Group(group) => {
                let mut respanned = proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(span);
                proc_macro2::TokenTree::Group(respanned)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// Registers the event at link time: a struct generic over types or constants has no single concrete type to
/// register; one generic over lifetimes only is registered with `'static` for each (its schema and contract do not
/// depend on them).
fn registration(input: &Input<'_>, krate: &syn::Path) -> TokenStream {
    let generics = &input.node.generics;
    if !generics.params.iter().all(|param| matches!(param, syn::GenericParam::Lifetime(_))) {
        return TokenStream::new();
    }
    let ident = &input.node.ident;
    let lifetimes = generics.params.iter().map(|_| quote!('static));
    let ty = if generics.params.is_empty() { quote!(#ident) } else { quote!(#ident<#(#lifetimes),*>) };
    let private = quote!(#krate::__private);
    let name = ident.to_string();
    quote_spanned! {ident.span()=>
        #private::inventory::submit! {
            #private::descriptor::<#ty>(#private::concat!(#private::module_path!(), "::", #name))
        }
    }
}

/// `#[derive(RedactedDebug)]`: a `Debug` impl that prints serde's view of the value with its sensitive values
/// masked, for any type that implements `Serialize` and `Redact` (an event, or a type nested in one).
pub(crate) fn derive_redacted_debug(node: &DeriveInput) -> TokenStream {
    let mut errors = Errors::new();
    let krate = crate::attr::krate_only(&node.attrs, &mut errors).unwrap_or_else(|| syn::parse_quote!(::outbox_core));
    if let Some(error) = errors.check() {
        return error.to_compile_error();
    }
    let ident = &node.ident;
    let private = quote!(#krate::__private);
    let name = ident.to_string();
    let order = declared_keys(node);
    let mut generics = node.generics.clone();
    generics.make_where_clause().predicates.push(syn::parse_quote!(Self: #private::Serialize + #private::Redact));
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    // Field marks are read by a derived `Redact` only: beside a hand-written one they would mask nothing.
    let marks_read = has_field_marks(node).then(|| {
        let (impl_generics, ty_generics, where_clause) = node.generics.split_for_impl();
        quote! {
            #[allow(dead_code)]
            fn __outbox_field_marks_are_read #impl_generics () #where_clause {
                fn derived<T: ?Sized + #private::DerivedRedact>() {}
                derived::<#ident #ty_generics>();
            }
        }
    });
    quote! {
        const _: () = {
            #marks_read

            #[automatically_derived]
            impl #impl_generics #private::fmt::Debug for #ident #ty_generics #where_clause {
                fn fmt(&self, f: &mut #private::fmt::Formatter<'_>) -> #private::fmt::Result {
                    #private::debug_redacted(self, #name, &[#(#order),*], f)
                }
            }
        };
    }
}

/// Whether a field of the struct carries an `#[outbox(...)]` mark.
fn has_field_marks(node: &DeriveInput) -> bool {
    let syn::Data::Struct(data) = &node.data else {
        return false;
    };
    data.fields.iter().any(|field| field.attrs.iter().any(|attr| attr.path().is_ident("outbox")))
}

/// The JSON keys of the struct's fields in declaration order (as serde names them), so that the redacted `Debug`
/// lists the fields in the order of the struct and not of the JSON object.
fn declared_keys(node: &DeriveInput) -> Vec<String> {
    let syn::Data::Struct(syn::DataStruct { fields: syn::Fields::Named(named), .. }) = &node.data else {
        return Vec::new();
    };
    let container = crate::serde::container(&node.attrs);
    named
        .named
        .iter()
        .filter_map(|field| {
            let serde = crate::serde::field(&field.attrs);
            if serde.skip || serde.flatten {
                return None;
            }
            if let Some(rename) = serde.rename {
                return Some(rename);
            }
            let name = field.ident.as_ref()?.to_string();
            let name = name.strip_prefix("r#").unwrap_or(&name).to_owned();
            Some(match container.rename_all {
                Some(rule) => rule.apply_to_field(&name),
                None => name,
            })
        })
        .collect()
}
