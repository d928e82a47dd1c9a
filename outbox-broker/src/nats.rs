//! NATS JetStream: a publish counts once the stream's `PubAck` arrives; the message id goes
//! in `Nats-Msg-Id`, so JetStream drops a retry within its duplicate window.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::{ConnectOptions, Event, HeaderMap, ServerError};
use async_trait::async_trait;
use outboxkit_core::broker::{BrokerFailure, BrokerMessage, BrokerResponse, BrokerTransport};
use outboxkit_core::error::{Error, ErrorKind, Result};

/// Subjects the server reported a publish permission violation for, since their last ack.
/// NATS reports a violation on the connection, not on the publish; the publish itself only
/// times out, so a timeout on a subject found here is a [`BrokerFailure::PermissionDenied`].
type Violations = Arc<Mutex<HashSet<String>>>;

/// A [`BrokerTransport`] on NATS JetStream (async-nats).
///
/// The client reconnects by itself, forever, after the server goes away: publishes made
/// meanwhile fail as [`BrokerFailure::Connection`] or [`BrokerFailure::Timeout`] and are
/// retried on the schedule.
#[derive(Clone)]
pub struct NatsTransport {
    client: async_nats::Client,
    jetstream: async_nats::jetstream::Context,
    violations: Violations,
}

impl std::fmt::Debug for NatsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsTransport")
            .field("state", &self.client.connection_state())
            .finish_non_exhaustive()
    }
}

impl NatsTransport {
    /// Connect to `url` (`nats://host:port`, user and password allowed in the URL).
    ///
    /// # Cancel Safety
    /// Cancelling drops the half-made connection; nothing was published.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::open(url, false).await.map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot connect to nats: {}", e.kind()),
            )
            .with_source(e)
        })
    }

    /// Like [`NatsTransport::connect`], but a server that cannot be reached now is not an
    /// error: the transport is returned unconnected and the client keeps connecting in the
    /// background, with backoff (publishes meanwhile fail as
    /// [`BrokerFailure::Connection`]). Refused credentials or TLS are still an error.
    ///
    /// # Cancel Safety
    /// Cancelling drops the half-made connection; nothing was published.
    pub async fn start(url: &str) -> Result<Self> {
        use async_nats::ConnectErrorKind as K;
        match Self::open(url, false).await {
            Ok(t) => Ok(t),
            Err(e) if matches!(e.kind(), K::Io | K::TimedOut | K::Dns) => {
                tracing::warn!(error = %e.kind(), "nats is unreachable: starting without it and connecting in the background");
                Self::open(url, true).await.map_err(|e| {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!("cannot connect to nats: {}", e.kind()),
                    )
                    .with_source(e)
                })
            }
            Err(e) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("cannot connect to nats: {}", e.kind()),
            )
            .with_source(e)),
        }
    }

    /// Whether the client is connected to a server now.
    pub fn is_connected(&self) -> bool {
        matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        )
    }

    async fn open(url: &str, lazy: bool) -> std::result::Result<Self, async_nats::ConnectError> {
        let violations: Violations = Arc::default();
        let seen = violations.clone();
        let options = ConnectOptions::new()
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(5))
            .event_callback(move |event| {
                let seen = seen.clone();
                async move {
                    if let Event::ServerError(ServerError::Other(text)) = &event {
                        if let Some(subject) = violated_subject(text) {
                            seen.lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(subject);
                        }
                    }
                    tracing::debug!(%event, "nats connection event");
                }
            });
        // async-nats does not read credentials from the URL: pass them on, and connect to
        // the URL without them.
        let (options, url) = match url::Url::parse(url) {
            Ok(mut u) if !u.username().is_empty() => {
                let user = percent_decode(u.username());
                let pass = percent_decode(u.password().unwrap_or_default());
                let _ = u.set_username("");
                let _ = u.set_password(None);
                (options.user_and_password(user, pass), u.to_string())
            }
            _ => (options, url.to_owned()),
        };
        let options = if lazy {
            options.retry_on_initial_connect()
        } else {
            options
        };
        let client = options.connect(url.as_str()).await?;
        let jetstream = async_nats::jetstream::new(client.clone());
        Ok(NatsTransport {
            client,
            jetstream,
            violations,
        })
    }

    /// The client, e.g. to create the stream the sink publishes to.
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &async_nats::jetstream::Context {
        &self.jetstream
    }

    async fn classify_failure(
        &self,
        subject: &str,
        kind: PublishErrorKind,
        detail: String,
    ) -> BrokerResponse {
        let violated = self
            .violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(subject);
        if violated {
            return BrokerResponse::failed(
                BrokerFailure::PermissionDenied,
                "permission violation for publish",
            );
        }
        let connected = matches!(
            self.client.connection_state(),
            async_nats::connection::State::Connected
        );
        match kind {
            PublishErrorKind::StreamNotFound => {
                // "No responders": either no stream listens on the subject, or JetStream
                // itself is not answering. Ask JetStream which.
                match self.jetstream.stream_by_subject(subject).await {
                    Err(e) if matches!(e.kind(), GetStreamByNameErrorKind::NotFound) => {
                        BrokerResponse::failed(BrokerFailure::NoRoute, "no stream for the subject")
                    }
                    _ => BrokerResponse::failed(
                        BrokerFailure::Unavailable,
                        "no responders: the stream is unavailable",
                    ),
                }
            }
            PublishErrorKind::MaxPayloadExceeded => {
                BrokerResponse::failed(BrokerFailure::Rejected, detail)
            }
            _ if !connected => BrokerResponse::failed(
                BrokerFailure::Connection,
                format!("not connected to nats: {detail}"),
            ),
            PublishErrorKind::TimedOut => BrokerResponse::failed(BrokerFailure::Timeout, detail),
            PublishErrorKind::BrokenPipe => {
                BrokerResponse::failed(BrokerFailure::Connection, detail)
            }
            _ => BrokerResponse::failed(BrokerFailure::Unavailable, detail),
        }
    }
}

/// Undo the URL's percent-encoding of a user name or password.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `Permissions Violation for Publish to "subject"` → the subject.
fn violated_subject(text: &str) -> Option<String> {
    let rest = text
        .to_ascii_lowercase()
        .find("permissions violation for publish to")
        .map(|at| &text[at + "permissions violation for publish to".len()..])?;
    let subject = rest.trim().trim_matches(|c| c == '"' || c == '\'').trim();
    let subject = subject.split_whitespace().next()?;
    Some(subject.trim_matches(|c| c == '"' || c == '\'').to_owned())
}

#[async_trait]
impl BrokerTransport for NatsTransport {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        let mut headers = HeaderMap::new();
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            message.dedup_id.as_str(),
        );
        for (k, v) in &message.headers {
            headers.insert(k.as_str(), v.as_str());
        }
        let subject = message.subject.clone();
        let body = bytes::Bytes::from(message.body);
        let send = async {
            let ack = self
                .jetstream
                .publish_with_headers(subject.clone(), headers, body)
                .await?;
            ack.await
        };
        let result = match tokio::time::timeout(message.timeout, send).await {
            Ok(r) => r,
            Err(_) => Err(PublishErrorKind::TimedOut.into()),
        };
        match result {
            Ok(ack) => {
                self.violations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&subject);
                BrokerResponse::Acknowledged {
                    duplicate: ack.duplicate,
                }
            }
            Err(e) => {
                let kind = e.kind();
                self.classify_failure(&subject, kind, e.to_string()).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_percent_decoded() {
        assert_eq!(percent_decode("p%40ss%2Bw"), "p@ss+w");
        assert_eq!(percent_decode("plain+%"), "plain+%");
    }

    #[test]
    fn permission_violations_name_their_subject() {
        let rows = [
            (
                "Permissions Violation for Publish to \"orders.created\"",
                Some("orders.created"),
            ),
            ("permissions violation for publish to 'a.b'", Some("a.b")),
            ("Permissions Violation for Subscription to \"x\"", None),
            ("Authorization Violation", None),
        ];
        for (text, want) in rows {
            assert_eq!(violated_subject(text).as_deref(), want, "{text}");
        }
    }
}
