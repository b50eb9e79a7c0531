//! The TLS options every broker sink URL shares: `tls_ca=PATH` (a PEM bundle of the certificate authorities to
//! trust instead of the system's), `tls_cert=PATH` and `tls_key=PATH` (a PEM client certificate and its key, for
//! servers that ask for one). TLS itself is switched on by the broker's TLS scheme or option (`amqps://`,
//! `rediss://`, `tls://`, `nats://...?tls=true`, `kafka://...?security_protocol=ssl`). Server certificates are
//! always verified, host name included: no option turns that off.

use std::path::{Path, PathBuf};

use super::url_options::Query;
use crate::error::Result;

/// The certificate files named by a sink URL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// `tls_ca`: the authorities to trust (PEM).
    pub(crate) ca: Option<PathBuf>,
    /// `tls_cert` and `tls_key`: the client certificate and its private key (PEM).
    pub(crate) client: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// Takes `tls_ca`, `tls_cert` and `tls_key` from `query`, checking that each file can be read and that a
    /// certificate comes with its key.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidSink`](crate::Error::InvalidSink) naming the option and the file (a path is no secret).
    pub(crate) fn from_query(query: &mut Query<'_>) -> Result<Self> {
        let mut file = |name: &str| -> Result<Option<PathBuf>> {
            match query.take(name) {
                None => Ok(None),
                Some(path) => {
                    let path = PathBuf::from(path);
                    readable(&path).map_err(|reason| query.invalid(&format!("`{name}`: {reason}")))?;
                    Ok(Some(path))
                }
            }
        };
        let ca = file("tls_ca")?;
        let cert = file("tls_cert")?;
        let key = file("tls_key")?;
        let client = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(query.invalid("`tls_cert` and `tls_key` go together (a client certificate and its key)")),
        };
        Ok(Self { ca, client })
    }

    /// Whether any TLS file is set.
    pub(crate) fn any(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }
}

/// Checks that `path` is a file this process can read; the reason is one line.
pub(crate) fn readable(path: &Path) -> std::result::Result<(), String> {
    std::fs::File::open(path).map(drop).map_err(|error| format!("cannot read {}: {}", path.display(), error.kind()))
}

/// Whether `error` (or an error it wraps) is a refused TLS handshake: the client did not trust the server's
/// certificate, or the server refused the client's (or its absence: with TLS 1.3 the server's alert, such as
/// `CertificateRequired`, arrives after the client thought the handshake done). Client libraries report it as an
/// I/O error of kind `InvalidData` wrapping the rustls error, or only by the rustls error's text. Retrying cannot
/// fix it.
#[cfg_attr(not(any(feature = "nats", feature = "redis", feature = "rabbitmq")), allow(dead_code))]
pub(crate) fn is_tls_refusal(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::InvalidData {
                return true;
            }
        }
        let text = error.to_string();
        if text.contains("invalid peer certificate") || text.contains("peer sent no certificates") {
            return true;
        }
        if text.contains("received fatal alert")
            && ["Certificate", "UnknownCA", "HandshakeFailure", "AccessDenied"].iter().any(|alert| text.contains(alert))
        {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::is_tls_refusal;

    #[test]
    fn certificate_refusals_are_told_from_connection_failures() {
        let io = |kind, text: &str| std::io::Error::new(kind, text.to_owned());
        for refusal in [
            io(std::io::ErrorKind::InvalidData, "invalid peer certificate: UnknownIssuer"),
            io(std::io::ErrorKind::Other, "received fatal alert: CertificateRequired"),
            io(std::io::ErrorKind::ConnectionReset, "received fatal alert: BadCertificate"),
            io(std::io::ErrorKind::Other, "peer sent no certificates"),
        ] {
            assert!(is_tls_refusal(&refusal), "{refusal}");
        }
        for failure in [
            io(std::io::ErrorKind::ConnectionRefused, "connection refused"),
            io(std::io::ErrorKind::Other, "received fatal alert: InternalError"),
            io(std::io::ErrorKind::TimedOut, "timed out"),
        ] {
            assert!(!is_tls_refusal(&failure), "{failure}");
        }
    }
}
