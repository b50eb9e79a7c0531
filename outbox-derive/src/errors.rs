//! Collecting every error of one derive, so that they are all reported together.

/// The errors found so far.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// How many errors were pushed.
    pub(crate) fn count(&self) -> usize {
        self.0.as_ref().map_or(0, |errors| errors.into_iter().count())
    }

    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// All errors as one, if any.
    pub(crate) fn into_error(self) -> Option<syn::Error> {
        self.0
    }
}
