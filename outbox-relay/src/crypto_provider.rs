//! One rustls crypto provider for the process.
//!
//! Every TLS client of the relay uses rustls on ring. With the `wal` feature, the replication client's dependencies
//! also build rustls's aws-lc-rs backend, and with two backends rustls no longer picks a process default by itself:
//! a client that asks for the default (the NATS and Redis publishers' libraries do) panics. So the relay installs
//! ring as the process default before it builds a client, unless the application installed a provider first (an
//! application that builds rustls clients of its own before the relay's installs one itself).

/// Installs ring as the process's default rustls provider, if none is installed yet.
pub(crate) fn install_default() {
    #[cfg(feature = "wal")]
    {
        // `Err` when a provider is installed already: that one stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
