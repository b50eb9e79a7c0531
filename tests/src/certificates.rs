//! A private certificate authority for TLS tests, made with the `openssl` command-line tool: a CA, a server
//! certificate for `localhost` and `127.0.0.1` signed by it, and a client certificate signed by it. Every file is
//! PEM, in a directory the caller owns.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of a private CA and of the certificates it signed.
#[derive(Debug, Clone)]
pub struct Certificates {
    /// The CA certificate: what a client trusts (`tls_ca=`).
    pub ca: PathBuf,
    /// The server certificate (subject alternative names `localhost`, `127.0.0.1`) and its key.
    pub server_cert: PathBuf,
    /// The server certificate's key.
    pub server_key: PathBuf,
    /// A client certificate (common name `outbox-relay`) and its key, for servers that ask for one.
    pub client_cert: PathBuf,
    /// The client certificate's key.
    pub client_key: PathBuf,
}

impl Certificates {
    /// Generates a CA named `name` and its certificates under `dir` (created if missing).
    ///
    /// # Panics
    ///
    /// When `openssl` is missing (the message says how to install it) or fails.
    #[must_use]
    pub fn generate(dir: &Path, name: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let file = |suffix: &str| dir.join(format!("{name}-{suffix}"));
        let certificates = Self {
            ca: file("ca.pem"),
            server_cert: file("server.pem"),
            server_key: file("server-key.pem"),
            client_cert: file("client.pem"),
            client_key: file("client-key.pem"),
        };
        let ca_key = file("ca-key.pem");
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name} test CA"),
            "-keyout",
            path(&ca_key),
            "-out",
            path(&certificates.ca),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        let sign = |cn: &str, key: &Path, cert: &Path, extensions: &str| {
            let csr = dir.join(format!("{name}-{cn}.csr"));
            let ext = dir.join(format!("{name}-{cn}.ext"));
            std::fs::write(&ext, extensions).expect("write the extensions file");
            openssl(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                path(key),
                "-out",
                path(&csr),
            ]);
            openssl(&[
                "x509",
                "-req",
                "-in",
                path(&csr),
                "-CA",
                path(&certificates.ca),
                "-CAkey",
                path(&ca_key),
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                path(cert),
                "-extfile",
                path(&ext),
            ]);
        };
        sign(
            "localhost",
            &certificates.server_key,
            &certificates.server_cert,
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        );
        sign("outbox-relay", &certificates.client_key, &certificates.client_cert, "extendedKeyUsage=clientAuth\n");
        certificates
    }
}

fn path(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn openssl(args: &[&str]) {
    let output = Command::new("openssl").args(args).output().unwrap_or_else(|e| {
        panic!("cannot run openssl ({e}): install it with `apt-get install openssl` (or `scripts/services.sh install`)")
    });
    assert!(output.status.success(), "openssl {} failed: {}", args[0], String::from_utf8_lossy(&output.stderr));
}
