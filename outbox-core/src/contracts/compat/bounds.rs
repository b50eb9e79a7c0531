//! Lower and upper bounds (`minimum`, `maxLength`, `minItems`, ...), shared by the number, string and array
//! keywords.

use super::*;

impl Walk {
    /// A lower bound (`minimum`) or an upper bound (`maximum`) of any kind.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bound(
        &mut self,
        old: &Map<String, Value>,
        new: &Map<String, Value>,
        at: &str,
        key: &str,
        lower: bool,
        tightened: Rule,
        loosened: Rule,
    ) {
        let (old_bound, new_bound) = (old.get(key).and_then(Value::as_f64), new.get(key).and_then(Value::as_f64));
        let text = |bound: Option<f64>| bound.map_or_else(|| "none".to_owned(), |b| format!("{key} {b}"));
        let stricter = match (old_bound, new_bound) {
            (None, None) => return,
            (Some(o), Some(n)) if o == n => return,
            (Some(o), Some(n)) => (n > o) == lower,
            (None, Some(_)) => true,
            (Some(_), None) => false,
        };
        let (old_text, new_text) = (text(old_bound), text(new_bound));
        let at = format!("{at}/{key}");
        if stricter {
            self.push(tightened, &at, old_text, new_text, true, false);
        } else {
            self.push(loosened, &at, old_text, new_text, false, true);
        }
    }
}
