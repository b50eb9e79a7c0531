//! URLs as the relay prints them: with any password replaced by `***`.

/// The URL with any password replaced by `***`, for messages and logs.
pub(crate) fn masked_url(url: &url::Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.to_string()
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
}
