//! `format`: numeric formats compare as ranges, the others as string or number constraints.

use super::*;

impl Walk {
    pub(super) fn format(&mut self, old: &Map<String, Value>, new: &Map<String, Value>, at: &str, common: u8) {
        let (old_format, new_format) =
            (old.get("format").and_then(Value::as_str), new.get("format").and_then(Value::as_str));
        if old_format == new_format {
            return;
        }
        let at = format!("{at}/format");
        let text = |format: Option<&str>| format.map_or_else(|| "no format".to_owned(), |f| format!("format {f}"));
        let (old_text, new_text) = (text(old_format), text(new_format));
        let old_range = old_format.map_or(Some(UNBOUNDED), numeric_range);
        let new_range = new_format.map_or(Some(UNBOUNDED), numeric_range);
        if let (Some(old_range), Some(new_range)) = (old_range, new_range) {
            if common & (INTEGER | NUMBER) == 0 {
                return;
            }
            let widens = new_range.0 <= old_range.0 && new_range.1 >= old_range.1;
            let narrows = new_range.0 >= old_range.0 && new_range.1 <= old_range.1;
            match (widens, narrows) {
                (true, true) => {}
                (true, false) => self.push(Rule::NumberConstraintLoosened, &at, old_text, new_text, false, true),
                (false, true) => self.push(Rule::NumberConstraintTightened, &at, old_text, new_text, true, false),
                (false, false) => self.push(Rule::NumberConstraintChanged, &at, old_text, new_text, true, true),
            }
            return;
        }
        let (tightened, loosened, changed) = if common & STRING != 0 || common & (INTEGER | NUMBER) == 0 {
            (Rule::StringConstraintTightened, Rule::StringConstraintLoosened, Rule::StringConstraintChanged)
        } else {
            (Rule::NumberConstraintTightened, Rule::NumberConstraintLoosened, Rule::NumberConstraintChanged)
        };
        match (old_format, new_format) {
            (None, Some(_)) => self.push(tightened, &at, old_text, new_text, true, false),
            (Some(_), None) => self.push(loosened, &at, old_text, new_text, false, true),
            _ => self.push(changed, &at, old_text, new_text, true, true),
        }
    }
}

pub(super) const UNBOUNDED: (f64, f64) = (f64::NEG_INFINITY, f64::INFINITY);

/// The range of a numeric `format` (schemars writes `int32` for `i32`, `uint8` for `u8`, ...).
pub(super) fn numeric_range(format: &str) -> Option<(f64, f64)> {
    let signed = |bits: i32| (-(2f64.powi(bits - 1)), 2f64.powi(bits - 1) - 1.0);
    let unsigned = |bits: i32| (0.0, 2f64.powi(bits) - 1.0);
    Some(match format {
        "int8" => signed(8),
        "int16" => signed(16),
        "int32" => signed(32),
        "int64" | "int" => signed(64),
        "int128" => signed(128),
        "uint8" => unsigned(8),
        "uint16" => unsigned(16),
        "uint32" => unsigned(32),
        "uint64" | "uint" => unsigned(64),
        "uint128" => unsigned(128),
        "float" => (-f64::from(f32::MAX), f64::from(f32::MAX)),
        "double" => UNBOUNDED,
        _ => return None,
    })
}
