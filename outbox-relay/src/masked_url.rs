//! URLs as the relay prints them: with any password replaced by `***`.

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn masked_url(url: &url::Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.to_string()
}

/// Text that should be a URL but may not parse (a sink or database URL), safe to print in logs and errors: a URL
/// with its password replaced by `***`; anything else with everything between the scheme's `:` and the last `@`
/// replaced by `***` (where a password would be).
///
/// # Example
///
/// ```
/// assert_eq!(outbox_relay::masked_url("postgres://app:hunter2@db:5432/shop"), "postgres://app:***@db:5432/shop");
/// assert_eq!(outbox_relay::masked_url("amqp://u:p@ss@host/%2f"), "amqp://u:***@host/%2f");
/// ```
#[must_use]
pub fn masked_text(text: &str) -> String {
    if let Ok(url) = url::Url::parse(text) {
        return masked_url(&url);
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
