//! Number keywords: `minimum`, `exclusiveMinimum`, `maximum`, `exclusiveMaximum`, `multipleOf`.

use super::*;

impl Walk {
    pub(super) fn numbers(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str) {
        let (tightened, loosened) = (Rule::NumberConstraintTightened, Rule::NumberConstraintLoosened);
        for key in ["minimum", "exclusiveMinimum"] {
            self.bound(old, new, at, key, true, tightened, loosened);
        }
        for key in ["maximum", "exclusiveMaximum"] {
            self.bound(old, new, at, key, false, tightened, loosened);
        }
        let multiple = |map: &Map<String, Value>| map.get("multipleOf").and_then(Value::as_f64).filter(|m| *m > 0.0);
        let text = |m: Option<f64>| m.map_or_else(|| "none".to_owned(), |m| format!("multipleOf {m}"));
        let at = format!("{at}/multipleOf");
        match (multiple(old), multiple(new)) {
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n)) if is_whole(n / o) => {
                self.push(tightened, &at, text(Some(o)), text(Some(n)), true, false)
            }
            (Some(o), Some(n)) if is_whole(o / n) => {
                self.push(loosened, &at, text(Some(o)), text(Some(n)), false, true)
            }
            (Some(o), Some(n)) => {
                self.push(Rule::NumberConstraintChanged, &at, text(Some(o)), text(Some(n)), true, true)
            }
            (None, Some(n)) => self.push(tightened, &at, text(None), text(Some(n)), true, false),
            (Some(o), None) => self.push(loosened, &at, text(Some(o)), text(None), false, true),
            (None, None) => {}
        }
    }
}

pub(super) fn is_whole(x: f64) -> bool {
    x.is_finite() && (x - x.round()).abs() < 1e-9
}
