//! Collecting every error of one derive, so that they are all reported together.
//!
//! Like serde's `Ctxt`, the collector must be [checked](Errors::check) before it goes away: dropping it unchecked
//! panics, so an error pushed on some path can never be lost silently by a derive that forgot to look.

/// The errors found so far; call [`check`](Self::check) once, at the end.
pub(crate) struct Errors {
    /// `None` once checked.
    errors: Option<Vec<syn::Error>>,
}

impl Errors {
    /// An empty collector.
    pub(crate) fn new() -> Self {
        Self { errors: Some(Vec::new()) }
    }

    /// How many errors were pushed.
    pub(crate) fn count(&self) -> usize {
        self.errors.as_ref().map_or(0, Vec::len)
    }

    /// Adds an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        if let Some(errors) = &mut self.errors {
            errors.push(error);
        }
    }

    /// All errors as one, if any; consumes the collector.
    pub(crate) fn check(mut self) -> Option<syn::Error> {
        let mut errors = self.errors.take().unwrap_or_default().into_iter();
        let mut combined = errors.next()?;
        for error in errors {
            combined.combine(error);
        }
        Some(combined)
    }
}

impl Drop for Errors {
    fn drop(&mut self) {
        if self.errors.is_some() && !std::thread::panicking() {
            panic!("outbox-derive: the error collector was dropped without being checked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Errors;

    #[test]
    fn check_combines_every_pushed_error_in_order() {
        let mut errors = Errors::new();
        errors.push(syn::Error::new(proc_macro2::Span::call_site(), "first"));
        errors.push(syn::Error::new(proc_macro2::Span::call_site(), "second"));
        assert_eq!(errors.count(), 2);
        let messages: Vec<String> = errors.check().unwrap().into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second"]);
    }

    #[test]
    fn an_empty_collector_checks_to_no_error() {
        assert!(Errors::new().check().is_none());
    }

    #[test]
    #[should_panic(expected = "dropped without being checked")]
    fn dropping_the_collector_unchecked_panics() {
        let mut errors = Errors::new();
        errors.push(syn::Error::new(proc_macro2::Span::call_site(), "lost"));
        drop(errors);
    }
}
