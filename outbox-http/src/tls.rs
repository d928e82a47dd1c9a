//! The TLS client configuration of the webhook transport and the mailer.
//!
//! rustls on the *ring* provider (never aws-lc-rs) trusting the Mozilla roots of
//! `webpki-roots`, so a delivery does not depend on the host's certificate store (a
//! distroless image has none). reqwest 0.13's own rustls setup would need a process-wide
//! crypto provider and the platform verifier; the clients are built on this instead.

use std::sync::Arc;

/// A rustls client configuration: *ring*, TLS 1.2 and 1.3, the `webpki-roots` trust
/// anchors, ALPN `h2` then `http/1.1`. Hand it to
/// `reqwest::ClientBuilder::tls_backend_preconfigured` for a client of your own that
/// trusts what the transport trusts.
pub fn tls_config() -> rustls::ClientConfig {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config
}

/// A reqwest client builder on [`tls_config`].
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(tls_config())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_client_builds_without_a_process_wide_crypto_provider() {
        super::client_builder().build().unwrap();
    }
}
