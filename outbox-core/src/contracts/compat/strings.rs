//! String keywords: `minLength`, `maxLength`, `pattern`, `contentEncoding`, `contentMediaType`.

use super::*;

impl Walk {
    pub(super) fn strings(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str) {
        let (tightened, loosened) = (Rule::StringConstraintTightened, Rule::StringConstraintLoosened);
        self.bound(old, new, at, "minLength", true, tightened, loosened);
        self.bound(old, new, at, "maxLength", false, tightened, loosened);
        for key in ["pattern", "contentEncoding", "contentMediaType"] {
            let (old_value, new_value) = (old.get(key), new.get(key));
            let text = |v: Option<&Value>| v.map_or_else(|| "none".to_owned(), short);
            let pointer = format!("{at}/{key}");
            match (old_value, new_value) {
                (None, None) => {}
                (Some(o), Some(n)) if o == n => {}
                (None, Some(_)) => self.push(tightened, &pointer, text(old_value), text(new_value), true, false),
                (Some(_), None) => self.push(loosened, &pointer, text(old_value), text(new_value), false, true),
                (Some(_), Some(_)) => {
                    self.push(Rule::StringConstraintChanged, &pointer, text(old_value), text(new_value), true, true)
                }
            }
        }
    }
}
