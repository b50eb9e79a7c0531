//! The impls emitted beside a compile error, so that the user sees the error about the attribute and not a
//! cascade of "`X` does not implement `OutboxEvent`" at every use of the type.

use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

/// Stub `Redact` and `OutboxEvent` impls, plus the errors.
pub(crate) fn event(node: &DeriveInput, krate: &syn::Path, error: Option<syn::Error>) -> TokenStream {
    let ident = &node.ident;
    let (impl_generics, ty_generics, where_clause) = node.generics.split_for_impl();
    let private = quote!(#krate::__private);
    // The supertraits as bounds, as the real impls have them: a generic struct is `Serialize` only for the type
    // arguments that are (serde's bounds), and an unbounded stub would add an error per type parameter.
    let (mut event_generics, mut versioned_generics) = (node.generics.clone(), node.generics.clone());
    if node.generics.type_params().next().is_some() {
        event_generics.make_where_clause().predicates.push(syn::parse_quote!(Self: #private::Serialize));
        versioned_generics.make_where_clause().predicates.push(syn::parse_quote!(Self: #private::OutboxEvent));
    }
    let event_where = event_generics.split_for_impl().2;
    let versioned_where = versioned_generics.split_for_impl().2;
    let error = error.map(|error| error.to_compile_error());
    if matches!(node.data, syn::Data::Union(_)) {
        // serde cannot serialize a union, so an `OutboxEvent` stub would only add an error about `Serialize`.
        return quote! {
            #error
        };
    }
    quote! {
        #error
        const _: () = {
            #[automatically_derived]
            impl #impl_generics #private::Redact for #ident #ty_generics #where_clause {}

            #[automatically_derived]
            impl #impl_generics #private::OutboxEvent for #ident #ty_generics #event_where {
                const EVENT_TYPE: &'static str = "invalid";
                const AGGREGATE_TYPE: &'static str = "invalid";
                const VERSION: u32 = 1;

                fn aggregate_id(&self) -> #private::String {
                    #private::unreachable!("#[derive(OutboxEvent)] failed")
                }
            }

            #[automatically_derived]
            impl #impl_generics #private::Versioned for #ident #ty_generics #versioned_where {
                type Previous = #private::NoPrevious;
            }
        };
    }
}

/// A stub `Redact` impl, plus the errors.
pub(crate) fn redact(node: &DeriveInput, krate: &syn::Path, error: Option<syn::Error>) -> TokenStream {
    let ident = &node.ident;
    let (impl_generics, ty_generics, where_clause) = node.generics.split_for_impl();
    let private = quote!(#krate::__private);
    let error = error.map(|error| error.to_compile_error());
    quote! {
        #error
        const _: () = {
            #[automatically_derived]
            impl #impl_generics #private::Redact for #ident #ty_generics #where_clause {}
        };
    }
}
