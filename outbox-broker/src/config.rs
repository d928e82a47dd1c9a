//! Broker URLs: `nats://…` for NATS JetStream, `amqp://…` for RabbitMQ.

use std::sync::Arc;

use outboxkit_core::broker::DynBrokerTransport;
use outboxkit_core::error::{Error, Result};

/// A broker address, checked for its scheme.
#[derive(Clone, PartialEq, Eq)]
pub enum BrokerUrl {
    /// `nats://host:port` (also `tls://`).
    Nats(String),
    /// `amqp://user:pass@host:port/vhost` (also `amqps://`).
    Amqp(String),
}

impl std::fmt::Debug for BrokerUrl {
    // No credentials in debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BrokerUrl::Nats(_) => "BrokerUrl::Nats(..)",
            BrokerUrl::Amqp(_) => "BrokerUrl::Amqp(..)",
        })
    }
}

impl BrokerUrl {
    /// Parse by scheme.
    pub fn parse(text: &str) -> Result<Self> {
        let url =
            url::Url::parse(text).map_err(|_| Error::invalid_input("broker", "is not a URL"))?;
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Error::invalid_input("broker", "needs a host"));
        }
        match url.scheme() {
            "nats" | "tls" => Ok(BrokerUrl::Nats(text.to_owned())),
            "amqp" | "amqps" => Ok(BrokerUrl::Amqp(text.to_owned())),
            _ => Err(Error::invalid_input(
                "broker",
                "must be a nats:// or amqp:// URL",
            )),
        }
    }

    /// The broker's name for logs: `nats` or `amqp`.
    pub fn kind(&self) -> &'static str {
        match self {
            BrokerUrl::Nats(_) => "nats",
            BrokerUrl::Amqp(_) => "amqp",
        }
    }
}

/// Connect to the broker at `url`. For RabbitMQ, messages go to `exchange` (`""`: the
/// default exchange, which routes by queue name); NATS ignores it. A scheme whose feature
/// is not compiled in is `Misconfigured`.
///
/// # Cancel Safety
/// Cancelling drops the half-made connection; nothing was published.
pub async fn connect(url: &BrokerUrl, exchange: &str) -> Result<Arc<DynBrokerTransport>> {
    let _ = exchange;
    match url {
        #[cfg(feature = "nats")]
        BrokerUrl::Nats(u) => Ok(Arc::new(crate::NatsTransport::connect(u).await?)),
        #[cfg(feature = "amqp")]
        BrokerUrl::Amqp(u) => Ok(Arc::new(crate::AmqpTransport::connect(u, exchange).await?)),
        #[allow(unreachable_patterns)]
        _ => Err(Error::misconfigured(
            "broker",
            "support for this broker is not compiled in (features `nats`, `amqp`)",
        )),
    }
}

/// A started broker transport: what [`start`] returns.
#[derive(Clone, Debug)]
pub struct Broker {
    transport: Arc<DynBrokerTransport>,
    link: Link,
}

#[derive(Clone, Debug)]
enum Link {
    #[cfg(feature = "nats")]
    Nats(Arc<crate::NatsTransport>),
    #[cfg(feature = "amqp")]
    Amqp(Arc<crate::AmqpTransport>),
}

impl Broker {
    /// The transport, for a `BrokerSink`.
    pub fn transport(&self) -> Arc<DynBrokerTransport> {
        self.transport.clone()
    }

    /// Whether the transport is connected to its broker now (for readiness checks).
    pub fn is_connected(&self) -> bool {
        match &self.link {
            #[cfg(feature = "nats")]
            Link::Nats(t) => t.is_connected(),
            #[cfg(feature = "amqp")]
            Link::Amqp(t) => t.is_connected(),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

/// Start a transport to the broker at `url`, as [`connect`] does, except that a broker that
/// cannot be reached now is not an error: the transport starts unconnected and connects in
/// the background, with backoff, when the broker comes back. A broker that answers and
/// refuses (credentials, TLS) is an error. Must be called within a Tokio runtime.
///
/// # Cancel Safety
/// Cancelling drops the half-made connection; nothing was published.
pub async fn start(url: &BrokerUrl, exchange: &str) -> Result<Broker> {
    let _ = exchange;
    match url {
        #[cfg(feature = "nats")]
        BrokerUrl::Nats(u) => {
            let t = Arc::new(crate::NatsTransport::start(u).await?);
            Ok(Broker {
                transport: t.clone(),
                link: Link::Nats(t),
            })
        }
        #[cfg(feature = "amqp")]
        BrokerUrl::Amqp(u) => {
            let t = crate::AmqpTransport::start(u, exchange).await?;
            Ok(Broker {
                transport: t.clone(),
                link: Link::Amqp(t),
            })
        }
        #[allow(unreachable_patterns)]
        _ => Err(Error::misconfigured(
            "broker",
            "support for this broker is not compiled in (features `nats`, `amqp`)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_table() {
        let rows = [
            ("nats://127.0.0.1:4222", Some("nats")),
            ("tls://nats.example:4222", Some("nats")),
            ("amqp://guest:guest@127.0.0.1:5672/%2f", Some("amqp")),
            ("amqps://rabbit.example/vh", Some("amqp")),
            ("http://127.0.0.1:4222", None),
            ("nats://", None),
            ("127.0.0.1:4222", None),
        ];
        for (text, want) in rows {
            assert_eq!(
                BrokerUrl::parse(text).ok().map(|u| u.kind()),
                want,
                "{text}"
            );
        }
        assert!(
            !format!("{:?}", BrokerUrl::parse("amqp://u:secret@h/").unwrap()).contains("secret")
        );
    }
}
