//! serde's `rename_all` rules, applied to field names as serde applies them.

/// A `rename_all` rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RenameRule {
    Lower,
    Upper,
    Pascal,
    Camel,
    Snake,
    ScreamingSnake,
    Kebab,
    ScreamingKebab,
}

impl RenameRule {
    /// The rule serde knows by `name`, if any (serde reports unknown rules itself).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "lowercase" => Self::Lower,
            "UPPERCASE" => Self::Upper,
            "PascalCase" => Self::Pascal,
            "camelCase" => Self::Camel,
            "snake_case" => Self::Snake,
            "SCREAMING_SNAKE_CASE" => Self::ScreamingSnake,
            "kebab-case" => Self::Kebab,
            "SCREAMING-KEBAB-CASE" => Self::ScreamingKebab,
            _ => return None,
        })
    }

    /// `field` (a snake_case Rust field name) renamed by the rule.
    pub(crate) fn apply_to_field(self, field: &str) -> String {
        match self {
            Self::Lower | Self::Snake => field.to_owned(),
            Self::Upper | Self::ScreamingSnake => field.to_ascii_uppercase(),
            Self::Pascal => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for c in field.chars() {
                    if c == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(c.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(c);
                    }
                }
                pascal
            }
            Self::Camel => {
                let pascal = Self::Pascal.apply_to_field(field);
                let mut chars = pascal.chars();
                chars.next().map(|first| first.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
            }
            Self::Kebab => field.replace('_', "-"),
            Self::ScreamingKebab => Self::ScreamingSnake.apply_to_field(field).replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RenameRule;

    #[test]
    fn every_rule_renames_a_field_like_serde() {
        let cases = [
            ("lowercase", "payer_email"),
            ("UPPERCASE", "PAYER_EMAIL"),
            ("PascalCase", "PayerEmail"),
            ("camelCase", "payerEmail"),
            ("snake_case", "payer_email"),
            ("SCREAMING_SNAKE_CASE", "PAYER_EMAIL"),
            ("kebab-case", "payer-email"),
            ("SCREAMING-KEBAB-CASE", "PAYER-EMAIL"),
        ];
        for (rule, expected) in cases {
            assert_eq!(RenameRule::from_name(rule).unwrap().apply_to_field("payer_email"), expected, "{rule}");
        }
        assert_eq!(RenameRule::from_name("Title Case"), None);
    }
}
