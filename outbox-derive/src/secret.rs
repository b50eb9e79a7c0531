//! The secret guard: field names that look like they hold a secret.

/// Single words that name a secret (compared lowercase, an `s` plural included).
const SECRET_WORDS: &[&str] =
    &["password", "passwd", "secret", "token", "apikey", "privatekey", "creditcard", "cardnumber", "cvv", "ssn"];

/// Two consecutive words that name a secret.
const SECRET_PAIRS: &[(&str, &str)] = &[("api", "key"), ("private", "key"), ("credit", "card"), ("card", "number")];

/// The secret `name` seems to hold (`password`, `api_key`, ...), if its words say so. Words are split at `_`,
/// `-` and camelCase boundaries, so `password_hash`, `apiKey` and `CARD_NUMBER` match but `classname` does not.
pub(crate) fn looks_secret(name: &str) -> Option<&'static str> {
    let words = words(name.trim_start_matches("r#"));
    for (index, word) in words.iter().enumerate() {
        let singular = word.strip_suffix('s').unwrap_or(word);
        if let Some(secret) = SECRET_WORDS.iter().find(|secret| **secret == word || **secret == singular) {
            return Some(secret);
        }
        if let Some(next) = words.get(index + 1) {
            let next = next.strip_suffix('s').unwrap_or(next);
            if let Some((first, _)) = SECRET_PAIRS.iter().find(|(first, second)| first == word && *second == next) {
                return Some(match *first {
                    "api" => "api_key",
                    "private" => "private_key",
                    "credit" => "credit_card",
                    _ => "card_number",
                });
            }
        }
    }
    None
}

/// `name` split into lowercase words at `_`, `-` and case changes (`APIKey` -> `api`, `key`).
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    for part in name.split(['_', '-']) {
        let chars: Vec<char> = part.chars().collect();
        let mut word = String::new();
        for (i, &c) in chars.iter().enumerate() {
            let starts_word = i > 0
                && c.is_uppercase()
                && (chars[i - 1].is_lowercase()
                    || chars[i - 1].is_ascii_digit()
                    || chars.get(i + 1).is_some_and(|next| next.is_lowercase()));
            if starts_word && !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            word.extend(c.to_lowercase());
        }
        if !word.is_empty() {
            words.push(word);
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::looks_secret;

    #[test]
    fn secret_names_are_caught_in_snake_camel_and_screaming_case() {
        let cases = [
            ("password", "password"),
            ("password_hash", "password"),
            ("userPasswd", "passwd"),
            ("client_secret", "secret"),
            ("refreshTokens", "token"),
            ("api_key", "api_key"),
            ("apiKey", "api_key"),
            ("APIKey", "api_key"),
            ("apikey", "apikey"),
            ("private_key", "private_key"),
            ("creditCardNumber", "credit_card"),
            ("CARD_NUMBER", "card_number"),
            ("cvv", "cvv"),
            ("customer_ssn", "ssn"),
            ("r#token", "token"),
        ];
        for (name, secret) in cases {
            assert_eq!(looks_secret(name), Some(secret), "{name}");
        }
    }

    #[test]
    fn ordinary_names_are_not_secrets() {
        for name in ["payment_id", "classname", "tokenizer", "key", "card_brand", "secretary", "ssnap", "email"] {
            assert_eq!(looks_secret(name), None, "{name}");
        }
    }
}
