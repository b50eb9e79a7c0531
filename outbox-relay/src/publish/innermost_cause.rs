//! The innermost cause of a failed call, in one line: what an error chain comes down to (a refused connection, an
//! untrusted certificate), for start-up errors and the reasons of failed publishes.

/// The first line of the innermost error of `error`'s [`source`](std::error::Error::source) chain (`error`
/// itself when it has no source).
pub(crate) fn innermost(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string().lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::innermost;

    /// An error that names its cause as its source, as client libraries wrap the errors of their transport.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + 'static>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.1.as_ref())
        }
    }

    #[test]
    fn the_innermost_cause_is_the_first_line_of_the_last_source() {
        let certificate =
            std::io::Error::new(std::io::ErrorKind::InvalidData, "invalid peer certificate: UnknownIssuer\nmore");
        let chain =
            Wrapped("error sending request", Box::new(Wrapped("client error (Connect)", Box::new(certificate))));
        assert_eq!(innermost(&chain), "invalid peer certificate: UnknownIssuer");
        let alone = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(innermost(&alone), "connection refused");
    }
}
