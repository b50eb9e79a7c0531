//! URLs as the relay prints them: with any password (and a NATS token given as the user name) replaced by `***`,
//! and the value of any query option that
//! names a secret (`password=`, `token=`, `nkey_seed=`, ...: the sinks refuse them, but the refusal prints the URL).

/// A URL that may hold a secret, kept by a builder: its `Debug` output is [`masked_url`]'s.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct MaskedUrl(pub(crate) url::Url);

impl std::ops::Deref for MaskedUrl {
    type Target = url::Url;

    fn deref(&self) -> &url::Url {
        &self.0
    }
}

impl std::fmt::Debug for MaskedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&masked_url(&self.0))
    }
}

/// The URL with any password, and the value of any secret-looking query option, replaced by `***`, for messages
/// and logs.
pub(crate) fn masked_url(url: &url::Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    } else if matches!(url.scheme(), "nats" | "tls") && !url.username().is_empty() {
        // A NATS user name without a password is a token.
        let _ = url.set_username("***");
    }
    if url.query_pairs().any(|(name, _)| is_secret_option(&name)) {
        // Piece by piece, so the other options keep their spelling.
        let query: Vec<String> = url
            .query()
            .unwrap_or_default()
            .split('&')
            .map(|piece| {
                let name = piece.split_once('=').map_or(piece, |(name, _)| name);
                let decoded = url::form_urlencoded::parse(name.as_bytes()).next().map(|(name, _)| name);
                if decoded.is_some_and(|name| is_secret_option(&name)) {
                    format!("{name}=***")
                } else {
                    piece.to_owned()
                }
            })
            .collect();
        url.set_query(Some(&query.join("&")));
    }
    url.to_string()
}

/// Whether a query option's value would be a secret (not a file path or a variable name that holds one).
fn is_secret_option(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    if name.ends_with("_file") || name.ends_with("_env") {
        return false;
    }
    ["password", "passwd", "pass", "token", "secret", "seed", "nkey", "creds", "credentials", "api_key", "signature"]
        .iter()
        .any(|secret| name == *secret || name.ends_with(&format!("_{secret}")))
}

/// Text that should be a URL but may not parse (a sink or database URL), safe to print in logs and errors: a URL
/// with its password replaced by `***`; anything else with everything between the scheme's `:` and the last `@`
/// replaced by `***` (where a password would be). A URL with nothing to mask is returned as it was written, not
/// as the URL parser spells it (`file:` stays `file:`, not `file:///`).
///
/// # Example
///
/// ```
/// assert_eq!(outbox_relay::masked_url("postgres://app:hunter2@db:5432/shop"), "postgres://app:***@db:5432/shop");
/// assert_eq!(outbox_relay::masked_url("amqp://u:p@ss@host/%2f"), "amqp://u:***@host/%2f");
/// assert_eq!(outbox_relay::masked_url("file:"), "file:");
/// ```
#[must_use]
pub fn masked_text(text: &str) -> String {
    if let Ok(url) = url::Url::parse(text) {
        let masked = masked_url(&url);
        return if masked == url.as_str() { text.to_owned() } else { masked };
    }
    match (text.find(':'), text.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => format!("{}***{}", &text[..=colon], &text[at..]),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_masked_and_the_rest_is_kept() {
        let url = "amqp://relay:hunter2@broker.example.com:5672/%2f?exchange=x".parse().unwrap();
        assert_eq!(super::masked_url(&url), "amqp://relay:***@broker.example.com:5672/%2f?exchange=x");
        let query = "nats://h:4222?subject=a&token=hunter2&nkey_seed=SUAhunter2&password_file=/run/pw".parse().unwrap();
        assert_eq!(super::masked_url(&query), "nats://h:4222?subject=a&token=***&nkey_seed=***&password_file=/run/pw");
        let token = "nats://s3cr3t@h:4222?subject=a".parse().unwrap();
        assert_eq!(super::masked_url(&token), "nats://***@h:4222?subject=a");
        let user = "amqps://relay@h/%2f".parse().unwrap();
        assert_eq!(super::masked_url(&user), "amqps://relay@h/%2f", "an AMQP user name is no secret");
        let plain = "https://hooks.example.com/x".parse().unwrap();
        assert_eq!(super::masked_url(&plain), "https://hooks.example.com/x");
    }

    #[test]
    fn passwords_in_text_that_is_no_url_are_masked_too() {
        assert_eq!(super::masked_text("https://u:hunter2@ho[st/x"), "https:***@ho[st/x");
        assert_eq!(super::masked_text("https:/a]?]%d/user:hunter2@host/x"), "https:***@host/x");
        assert_eq!(super::masked_text("amqp://u:p@ss@host/%2f"), "amqp://u:***@host/%2f");
        assert_eq!(super::masked_text("stdout"), "stdout");
        assert_eq!(super::masked_text("nats://host:4222"), "nats://host:4222");
    }
}
