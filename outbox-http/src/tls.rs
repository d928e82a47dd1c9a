//! The TLS client configuration of the webhook transport and the mailer, and the pooled
//! client both are built on.
//!
//! rustls on the *ring* provider (never aws-lc-rs) trusting the Mozilla roots of
//! `webpki-roots`, so a delivery does not depend on the host's certificate store (a
//! distroless image has none). reqwest 0.13's own rustls setup would need a process-wide
//! crypto provider and the platform verifier; the clients are built on this instead.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::timing::Timed;

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

/// The connector of the webhook transport and the mailer: TCP through `http` (no delay;
/// `https` allowed, which schemes a caller may use is its own check), then rustls on
/// [`tls_config`] for `https` (ALPN `h2` then `http/1.1`, set by the connector), each new
/// connection timed (`timing.rs`).
pub(crate) fn connector<R>(
    mut http: HttpConnector<R>,
) -> Timed<hyper_rustls::HttpsConnector<HttpConnector<R>>> {
    http.set_nodelay(true);
    http.enforce_http(false);
    let mut tls = tls_config();
    // The connector sets ALPN itself.
    tls.alpn_protocols.clear();
    Timed(
        hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(http),
    )
}

/// hyper-util's pooled client over `connector`, on tokio's executor and timers.
pub(crate) fn pooled<C>(connector: C) -> Client<C, Full<Bytes>>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector)
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
