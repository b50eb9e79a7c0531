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
            impl #impl_generics #private::OutboxEvent for #ident #ty_generics #where_clause {
                const EVENT_TYPE: &'static str = "invalid";
                const AGGREGATE_TYPE: &'static str = "invalid";
                const VERSION: u32 = 1;

                fn aggregate_id(&self) -> #private::String {
                    #private::unreachable!("#[derive(OutboxEvent)] failed")
                }
            }

            #[automatically_derived]
            impl #impl_generics #private::Versioned for #ident #ty_generics #where_clause {
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
