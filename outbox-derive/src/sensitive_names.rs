//! The field names the guards catch. The words are listed in one place, `sensitive_names.md`, which is both the
//! documentation of `#[derive(OutboxEvent)]` (its "Guards for secrets and personal data") and the data read here,
//! so the documented lists and the checked ones cannot differ.
//!
//! A field whose name matches a secret or personal data must be marked `#[outbox(sensitive)]` or
//! `#[outbox(not_sensitive)]` (`valid.rs` reports it). A name is split into lowercase words at `_`, `-` and
//! camelCase boundaries (`customerEmail`, `CUSTOMER_EMAIL` and `customer_email` are `customer`, `email`), and a
//! listed name (`api_key` is the phrase `api`, `key`) matches whole, consecutive words, its last word also in the
//! plural (`emails`, `addresses`): `email` matches `billing_email` but not `emailed_at`, `classname` matches
//! nothing.
//!
//! Personal data has one more rule, for names that describe the data rather than hold it: a match followed by
//! words ending in a describing word (`phone_count`, `email_verified`, `birth_date_changed_at`), or in a name that
//! starts with a flag word (`has_phone`, `is_email_public`), is not personal data.

use std::sync::LazyLock;

/// The lists as documented: list items (`- ...`, continued on indented lines) of each bolded section; every
/// backquoted name in an item is one entry.
const DOCUMENTED: &str = include_str!("sensitive_names.md");

/// The lists of `sensitive_names.md`.
#[derive(Debug, Default)]
struct Lists {
    /// Phrases that name a secret: secrets do not belong in events at all (publish an identifier).
    secrets: Vec<Vec<String>>,
    /// Phrases that name personal data.
    personal_data: Vec<Vec<String>>,
    /// Words that, ending a name after a personal-data phrase, make it describe the data rather than hold it.
    describing: Vec<String>,
    /// Words that, starting a name, make it a flag about the data.
    flags: Vec<String>,
}

static LISTS: LazyLock<Lists> = LazyLock::new(|| Lists::parse(DOCUMENTED));

impl Lists {
    fn parse(text: &str) -> Self {
        let mut lists = Self::default();
        let mut section = "";
        let mut item: Option<String> = None;
        // A blank line closes the last item too.
        for line in text.lines().chain([""]) {
            if let (Some(text), true) = (&mut item, line.starts_with("  ")) {
                text.push_str(line);
                continue;
            }
            if let Some(text) = item.take() {
                lists.add(section, &text);
            }
            if let Some(label) = line.strip_prefix("**").and_then(|rest| rest.split_once("**")) {
                section = label.0.trim_end_matches('.');
            } else if let Some(text) = line.strip_prefix("- ") {
                item = Some(text.to_owned());
            }
        }
        lists
    }

    /// Adds the backquoted names of one list item to the list of `section`.
    fn add(&mut self, section: &str, item: &str) {
        let names = item.split('`').skip(1).step_by(2);
        match section {
            "Secrets" => self.secrets.extend(names.map(phrase)),
            "Personal data" => self.personal_data.extend(names.map(phrase)),
            "Describing words" => self.describing.extend(names.map(str::to_owned)),
            "Flag words" => self.flags.extend(names.map(str::to_owned)),
            _ => {}
        }
    }
}

/// `api_key` -> `api`, `key`.
fn phrase(name: &str) -> Vec<String> {
    name.split('_').map(str::to_owned).collect()
}

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
    if let Some(phrase) = find(&words, &LISTS.secrets, false) {
        return Some(Finding::Secret(phrase));
    }
    find(&words, &LISTS.personal_data, true).map(Finding::PersonalData)
}

/// The first phrase of `phrases` in `words`, joined with `_`; with `describes`, matches that only describe the
/// data (see [`Lists::describing`], [`Lists::flags`]) are passed over.
fn find(words: &[String], phrases: &[Vec<String>], describes: bool) -> Option<String> {
    if describes && words.first().is_some_and(|first| LISTS.flags.contains(first)) {
        return None;
    }
    for start in 0..words.len() {
        for phrase in phrases {
            let end = start + phrase.len();
            if end > words.len() || !matches_phrase(&words[start..end], phrase) {
                continue;
            }
            let describes_it = describes && words[end..].last().is_some_and(|last| LISTS.describing.contains(last));
            if !describes_it {
                return Some(phrase.join("_"));
            }
        }
    }
    None
}

/// Whether `words` are `phrase`, the last one possibly in the plural.
fn matches_phrase(words: &[String], phrase: &[String]) -> bool {
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
    use super::{classify, Finding, DOCUMENTED, LISTS};

    #[test]
    fn every_section_of_the_documented_list_is_read_and_every_entry_can_match() {
        let labels: Vec<&str> = DOCUMENTED
            .lines()
            .filter_map(|line| line.strip_prefix("**")?.split_once("**").map(|(label, _)| label))
            .collect();
        assert_eq!(labels, ["Secrets.", "Personal data", "Describing words.", "Flag words."]);
        // Every backquoted name on a list line (or its indented continuation) is in a list: none is lost.
        let listed: usize = DOCUMENTED
            .lines()
            .filter(|line| line.starts_with("- ") || line.starts_with("  "))
            .map(|line| line.matches('`').count() / 2)
            .sum();
        let read = LISTS.secrets.len() + LISTS.personal_data.len() + LISTS.describing.len() + LISTS.flags.len();
        assert_eq!(read, listed);
        let phrases = LISTS.secrets.iter().chain(&LISTS.personal_data);
        let words = phrases.flatten().chain(&LISTS.describing).chain(&LISTS.flags);
        for word in words {
            // Names are split into lowercase words before they are compared, so anything else would never match.
            assert!(!word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase()), "{word:?}");
        }
        for list in [&LISTS.secrets, &LISTS.personal_data] {
            assert!(!list.is_empty());
            let mut names: Vec<String> = list.iter().map(|phrase| phrase.join("_")).collect();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), list.len(), "a name is listed twice");
        }
        assert!(!LISTS.describing.is_empty() && !LISTS.flags.is_empty());
    }

    #[test]
    fn every_documented_secret_and_personal_data_name_is_caught_as_itself() {
        for phrase in &LISTS.secrets {
            let name = phrase.join("_");
            assert_eq!(classify(&name), Some(Finding::Secret(name.clone())), "{name}");
        }
        for phrase in &LISTS.personal_data {
            let name = phrase.join("_");
            assert_eq!(classify(&name), Some(Finding::PersonalData(name.clone())), "{name}");
            assert_eq!(classify(&format!("customer_{name}")), Some(Finding::PersonalData(name.clone())), "{name}");
        }
    }

    #[test]
    fn every_documented_describing_and_flag_word_makes_personal_data_a_description() {
        for word in &LISTS.describing {
            assert_eq!(classify(&format!("email_{word}")), None, "{word}");
            assert_eq!(classify(&format!("birth_date_{word}")), None, "{word}");
        }
        for word in &LISTS.flags {
            assert_eq!(classify(&format!("{word}_email")), None, "{word}");
            // Secrets have no such exception.
            assert_eq!(classify(&format!("{word}_password")), Some(Finding::Secret("password".to_owned())), "{word}");
        }
    }

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
