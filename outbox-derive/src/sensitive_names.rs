//! The field names the guards catch: the one place that lists the words that name a secret and the words that
//! name personal data.
//!
//! A field whose name matches either list must be marked `#[outbox(sensitive)]` or `#[outbox(not_sensitive)]`
//! (`valid.rs` reports it). A name is split into lowercase words at `_`, `-` and camelCase boundaries
//! (`customerEmail`, `CUSTOMER_EMAIL` and `customer_email` are `customer`, `email`), and a phrase matches whole,
//! consecutive words, its last word also in the plural (`emails`, `addresses`): `email` matches
//! `billing_email` but not `emailed_at`, `classname` matches nothing.
//!
//! Personal data has one more rule, for names that describe the data rather than hold it: a match followed by
//! words ending in a [`METADATA_WORDS`] word (`phone_count`, `email_verified`, `birth_date_changed_at`), or in a
//! name that starts with a [`FLAG_WORDS`] word (`has_phone`, `is_email_public`), is not personal data.

/// Phrases that name a secret: secrets do not belong in events at all (publish an identifier).
const SECRETS: &[&[&str]] = &[
    &["password"],
    &["passwd"],
    &["secret"],
    &["token"],
    &["apikey"],
    &["api", "key"],
    &["privatekey"],
    &["private", "key"],
    &["creditcard"],
    &["credit", "card"],
    &["cardnumber"],
    &["card", "number"],
    &["cvv"],
];

/// Phrases that name personal data (GDPR's "information relating to an identifiable person", LGPD's "dado
/// pessoal"): contact details, government and tax identifiers, bank accounts, birth dates, postal addresses and
/// personal names.
///
/// A bare `address` is not on the list: `ip_address`, `wallet_address` and `contract_address` name other things;
/// the postal kinds are (`home_address`, `billing_address`, ...), and `email_address` matches `email`. A bare
/// `name` is not either (`product_name`, `event_name`); the personal ones are.
const PERSONAL_DATA: &[&[&str]] = &[
    // contact
    &["email"],
    &["phone"],
    &["telephone"],
    &["msisdn"],
    // government and tax identifiers
    &["ssn"],
    &["cpf"],
    &["cnpj"],
    &["passport"],
    &["taxid"],
    &["tax", "id"],
    &["tax", "number"],
    &["national", "id"],
    &["driver", "license"],
    &["drivers", "license"],
    // bank accounts
    &["iban"],
    &["bank", "account"],
    &["account", "number"],
    // birth
    &["birthdate"],
    &["birthday"],
    &["birth", "date"],
    &["date", "of", "birth"],
    &["dob"],
    // postal addresses
    &["home", "address"],
    &["street", "address"],
    &["postal", "address"],
    &["mailing", "address"],
    &["billing", "address"],
    &["shipping", "address"],
    &["residential", "address"],
    // personal names
    &["first", "name"],
    &["last", "name"],
    &["full", "name"],
    &["surname"],
];

/// Words that, ending a name after a personal-data phrase, make it describe the data rather than hold it:
/// `phone_count`, `email_verified`, `email_sent_at`, `email_status`.
pub(crate) const METADATA_WORDS: &[&str] = &[
    "at",
    "on",
    "count",
    "counts",
    "total",
    "verified",
    "confirmed",
    "enabled",
    "disabled",
    "status",
    "state",
    "type",
    "kind",
    "id",
    "ids",
    "hash",
    "format",
    "provider",
    "sent",
    "changed",
    "updated",
    "required",
    "optin",
    "optout",
];

/// Words that, starting a name, make it a flag about the data: `has_phone`, `is_email_public`.
pub(crate) const FLAG_WORDS: &[&str] = &["is", "has", "had", "can", "should", "was", "with", "without"];

/// What a field's name says it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A secret, named by the phrase (`password`, `api_key`).
    Secret(String),
    /// Personal data, named by the phrase (`email`, `birth_date`).
    PersonalData(String),
}

/// What `name` seems to hold, if its words say so; a secret wins over personal data.
pub(crate) fn classify(name: &str) -> Option<Finding> {
    let words = words(name.trim_start_matches("r#"));
    if let Some(phrase) = find(&words, SECRETS, false) {
        return Some(Finding::Secret(phrase));
    }
    find(&words, PERSONAL_DATA, true).map(Finding::PersonalData)
}

/// The first phrase of `phrases` in `words`, joined with `_`; with `describes`, matches that only describe the
/// data (see [`METADATA_WORDS`], [`FLAG_WORDS`]) are passed over.
fn find(words: &[String], phrases: &[&[&str]], describes: bool) -> Option<String> {
    if describes && words.first().is_some_and(|first| FLAG_WORDS.contains(&first.as_str())) {
        return None;
    }
    for start in 0..words.len() {
        for phrase in phrases {
            let end = start + phrase.len();
            if end > words.len() || !matches_phrase(&words[start..end], phrase) {
                continue;
            }
            let describes_it =
                describes && words[end..].last().is_some_and(|last| METADATA_WORDS.contains(&last.as_str()));
            if !describes_it {
                return Some(phrase.join("_"));
            }
        }
    }
    None
}

/// Whether `words` are `phrase`, the last one possibly in the plural.
fn matches_phrase(words: &[String], phrase: &[&str]) -> bool {
    let Some((last, rest)) = phrase.split_last() else { return false };
    let Some((last_word, rest_words)) = words.split_last() else { return false };
    rest.iter().zip(rest_words).all(|(expected, word)| expected == word)
        && (last_word == last
            || last_word.strip_suffix('s').is_some_and(|singular| singular == *last)
            || last_word.strip_suffix("es").is_some_and(|singular| singular == *last))
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
    use super::{classify, Finding};

    fn secret(name: &str) -> Option<String> {
        match classify(name) {
            Some(Finding::Secret(phrase)) => Some(phrase),
            _ => None,
        }
    }

    fn personal(name: &str) -> Option<String> {
        match classify(name) {
            Some(Finding::PersonalData(phrase)) => Some(phrase),
            _ => None,
        }
    }

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
            ("r#token", "token"),
        ];
        for (name, phrase) in cases {
            assert_eq!(secret(name).as_deref(), Some(phrase), "{name}");
        }
    }

    #[test]
    fn ordinary_names_are_not_secrets() {
        for name in ["payment_id", "classname", "tokenizer", "key", "card_brand", "secretary", "ssnap", "email"] {
            assert_eq!(secret(name), None, "{name}");
        }
    }

    #[test]
    fn personal_data_is_caught_by_word_in_compound_names() {
        let cases = [
            ("email", "email"),
            ("customer_email", "email"),
            ("billingPhone", "phone"),
            ("PHONE_NUMBER", "phone"),
            ("email_addresses", "email"),
            ("customer_ssn", "ssn"),
            ("payer_cpf", "cpf"),
            ("company_cnpj", "cnpj"),
            ("iban", "iban"),
            ("tax_id", "tax_id"),
            ("taxId", "tax_id"),
            ("birth_date", "birth_date"),
            ("dateOfBirth", "date_of_birth"),
            ("passport_number", "passport"),
            ("shipping_address", "shipping_address"),
            ("bank_account", "bank_account"),
            ("first_name", "first_name"),
            ("phones", "phone"),
            ("r#email", "email"),
        ];
        for (name, phrase) in cases {
            assert_eq!(personal(name).as_deref(), Some(phrase), "{name}");
        }
    }

    #[test]
    fn names_that_only_contain_the_letters_or_describe_the_data_are_not_personal_data() {
        let names = [
            "emailed_at",
            "phone_count",
            "email_verified",
            "email_sent_at",
            "tax_id_verified",
            "has_phone",
            "is_email_public",
            "headphones",
            "ip_address",
            "wallet_address",
            "product_name",
            "dobby",
            "payment_id",
            "cpfx",
            "birth_place",
        ];
        for name in names {
            assert_eq!(classify(name), None, "{name}");
        }
    }

    #[test]
    fn a_secret_wins_over_personal_data() {
        assert_eq!(classify("email_password"), Some(Finding::Secret("password".to_owned())));
    }
}
