//! RabbitMQ (AMQP 0-9-1): a publish counts once the broker's publisher confirm (`basic.ack`)
//! arrives for a message it could route (`mandatory`); the message id goes in the
//! `message-id` property.

use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ErrorKind};
use outboxkit_core::broker::{BrokerFailure, BrokerMessage, BrokerResponse, BrokerTransport};
use outboxkit_core::error::{Error, Result};

/// A [`BrokerTransport`] on RabbitMQ (lapin) with publisher confirms.
///
/// Publishes go to one exchange (`""`, the default exchange, routes by queue name); the
/// routing key is the sink's subject. Every publish is `mandatory` and persistent: a
/// message no queue takes comes back as [`BrokerFailure::NoRoute`] instead of being
/// dropped. After a lost connection (or a channel the broker closed on an error) the next
/// publish connects again: the relay recovers without a restart.
pub struct AmqpTransport {
    uri: String,
    exchange: String,
    connect_timeout: Duration,
    link: tokio::sync::Mutex<Option<Link>>,
    /// Whether the link was up when last looked at (for [`AmqpTransport::is_connected`]
    /// while the link is busy).
    up: std::sync::atomic::AtomicBool,
}

struct Link {
    // Kept so the connection lives as long as its channel.
    _connection: Connection,
    channel: Channel,
}

impl std::fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTransport")
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

impl AmqpTransport {
    /// Connect to `uri` (`amqp://user:pass@host:5672/%2f`) and publish to `exchange`
    /// (`""` for the default exchange).
    ///
    /// # Cancel Safety
    /// Cancelling drops the half-made connection; nothing was published.
    pub async fn connect(uri: &str, exchange: &str) -> Result<Self> {
        let t = AmqpTransport {
            uri: uri.to_owned(),
            exchange: exchange.to_owned(),
            connect_timeout: Duration::from_secs(5),
            link: tokio::sync::Mutex::new(None),
            up: std::sync::atomic::AtomicBool::new(false),
        };
        let link = t.open().await.map_err(|e| {
            Error::new(
                outboxkit_core::ErrorKind::Unavailable,
                format!("cannot connect to rabbitmq: {}", describe(&e)),
            )
            .with_source(e)
        })?;
        *t.link.lock().await = Some(link);
        t.up.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(t)
    }

    /// Like [`AmqpTransport::connect`], but a broker that cannot be reached now (connection
    /// refused, timed out) is not an error: the transport starts unconnected and a task of
    /// its own connects in the background, with backoff from 1 s to 30 s, for as long as the
    /// transport lives (publishes meanwhile fail as [`BrokerFailure::Connection`]). A
    /// broker that answers and refuses (credentials, vhost) is still an error.
    ///
    /// # Cancel Safety
    /// Cancelling drops the half-made connection; nothing was published.
    pub async fn start(uri: &str, exchange: &str) -> Result<std::sync::Arc<Self>> {
        let t = std::sync::Arc::new(AmqpTransport {
            uri: uri.to_owned(),
            exchange: exchange.to_owned(),
            connect_timeout: Duration::from_secs(5),
            link: tokio::sync::Mutex::new(None),
            up: std::sync::atomic::AtomicBool::new(false),
        });
        match t.open().await {
            Ok(link) => *t.link.lock().await = Some(link),
            Err(e) if matches!(e.kind(), ErrorKind::IOError(_)) => {
                tracing::warn!(error = %describe(&e), "rabbitmq is unreachable: starting without it and connecting in the background");
            }
            Err(e) => {
                return Err(Error::new(
                    outboxkit_core::ErrorKind::Unavailable,
                    format!("cannot connect to rabbitmq: {}", describe(&e)),
                )
                .with_source(e))
            }
        }
        let weak = std::sync::Arc::downgrade(&t);
        tokio::spawn(async move {
            let mut delay = Duration::from_secs(1);
            loop {
                tokio::time::sleep(delay).await;
                let Some(t) = weak.upgrade() else { return };
                let was = t.is_connected();
                let ok = {
                    let mut link = t.link.lock().await;
                    t.live_channel(&mut link).await.is_ok()
                };
                if ok && !was {
                    tracing::info!("connected to rabbitmq");
                }
                delay = if ok {
                    Duration::from_secs(1)
                } else {
                    delay.saturating_mul(2).min(Duration::from_secs(30))
                };
            }
        });
        Ok(t)
    }

    /// Whether the publishing connection is up now (false while a publish or a reconnect
    /// holds it and it was not up before).
    pub fn is_connected(&self) -> bool {
        match self.link.try_lock() {
            Ok(link) => link.as_ref().is_some_and(|l| {
                l.channel.status().connected() && l._connection.status().connected()
            }),
            Err(_) => self.up.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// A fresh channel on the current connection (for declaring queues and consuming).
    pub async fn channel(&self) -> Result<Channel> {
        let mut link = self.link.lock().await;
        let ch = self.live_channel(&mut link).await.map_err(|e| {
            Error::new(outboxkit_core::ErrorKind::Unavailable, describe(&e)).with_source(e)
        })?;
        drop(ch);
        let conn = &link.as_ref().map(|l| &l._connection);
        match conn {
            Some(c) => c.create_channel().await.map_err(|e| {
                Error::new(outboxkit_core::ErrorKind::Unavailable, describe(&e)).with_source(e)
            }),
            None => Err(Error::new(
                outboxkit_core::ErrorKind::Unavailable,
                "not connected to rabbitmq",
            )),
        }
    }

    async fn open(&self) -> lapin::Result<Link> {
        let connect = Connection::connect(&self.uri, ConnectionProperties::default());
        let connection = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(c) => c?,
            Err(_) => {
                return Err(lapin::Error::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                )))
            }
        };
        let channel = connection.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Link {
            _connection: connection,
            channel,
        })
    }

    /// The publishing channel, connecting again when it is gone.
    async fn live_channel(&self, link: &mut Option<Link>) -> lapin::Result<Channel> {
        use std::sync::atomic::Ordering;
        if let Some(l) = link.as_ref() {
            if l.channel.status().connected() && l._connection.status().connected() {
                self.up.store(true, Ordering::Relaxed);
                return Ok(l.channel.clone());
            }
        }
        *link = None;
        self.up.store(false, Ordering::Relaxed);
        let fresh = self.open().await?;
        let ch = fresh.channel.clone();
        *link = Some(fresh);
        self.up.store(true, Ordering::Relaxed);
        Ok(ch)
    }

    async fn send(&self, message: &BrokerMessage) -> lapin::Result<Confirmation> {
        let channel = {
            let mut link = self.link.lock().await;
            self.live_channel(&mut link).await?
        };
        let mut headers = FieldTable::default();
        for (k, v) in &message.headers {
            headers.insert(
                ShortString::from(k.as_str()),
                AMQPValue::LongString(LongString::from(v.as_bytes().to_vec())),
            );
        }
        let mut properties = BasicProperties::default()
            .with_message_id(ShortString::from(message.dedup_id.as_str()))
            .with_delivery_mode(2)
            .with_headers(headers);
        // The standard property too (application/json for the envelope), which AMQP
        // consumers read rather than a custom header.
        if let Some(ct) = message.header("content-type") {
            properties = properties.with_content_type(ShortString::from(ct));
        }
        let confirm = channel
            .basic_publish(
                ShortString::from(self.exchange.as_str()),
                ShortString::from(message.subject.as_str()),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &message.body,
                properties,
            )
            .await?;
        confirm.await
    }
}

/// A short description of a lapin error: no address, no credentials.
fn describe(e: &lapin::Error) -> String {
    match e.kind() {
        ErrorKind::ProtocolError(p) => format!("rabbitmq refused: {}", p.get_message()),
        ErrorKind::IOError(io) => format!("connection: {}", io.kind()),
        ErrorKind::InvalidChannelState(..) | ErrorKind::InvalidConnectionState(_) => {
            "the connection or channel is closed".to_owned()
        }
        ErrorKind::MissingHeartbeatError => "missed heartbeats".to_owned(),
        _ => "amqp client error".to_owned(),
    }
}

/// The failure a lapin error stands for.
fn failure_of(e: &lapin::Error) -> BrokerFailure {
    match e.kind() {
        ErrorKind::ProtocolError(p) => match p.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND | AMQPSoftError::NOROUTE) => {
                BrokerFailure::NoRoute
            }
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => BrokerFailure::PermissionDenied,
            AMQPErrorKind::Soft(AMQPSoftError::CONTENTTOOLARGE)
            | AMQPErrorKind::Hard(AMQPHardError::FRAMEERROR) => BrokerFailure::Rejected,
            AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED) => BrokerFailure::Connection,
            _ => BrokerFailure::Unavailable,
        },
        _ => BrokerFailure::Connection,
    }
}

#[async_trait]
impl BrokerTransport for AmqpTransport {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        match tokio::time::timeout(message.timeout, self.send(&message)).await {
            Err(_) => {
                BrokerResponse::failed(BrokerFailure::Timeout, "no confirm within the deadline")
            }
            Ok(Ok(Confirmation::Ack(None))) => BrokerResponse::Acknowledged { duplicate: false },
            Ok(Ok(Confirmation::Ack(Some(returned)))) => BrokerResponse::failed(
                BrokerFailure::NoRoute,
                format!("returned unroutable: {}", returned.reply_text.as_str()),
            ),
            Ok(Ok(Confirmation::Nack(_))) => {
                BrokerResponse::failed(BrokerFailure::Unavailable, "the broker nacked the message")
            }
            Ok(Ok(Confirmation::NotRequested)) => {
                BrokerResponse::failed(BrokerFailure::Unavailable, "publisher confirms are off")
            }
            Ok(Err(e)) => BrokerResponse::failed(failure_of(&e), describe(&e)),
        }
    }
}
