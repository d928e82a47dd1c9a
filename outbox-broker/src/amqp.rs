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
        };
        let link = t.open().await.map_err(|e| {
            Error::new(
                outboxkit_core::ErrorKind::Unavailable,
                format!("cannot connect to rabbitmq: {}", describe(&e)),
            )
            .with_source(e)
        })?;
        *t.link.lock().await = Some(link);
        Ok(t)
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
        if let Some(l) = link.as_ref() {
            if l.channel.status().connected() && l._connection.status().connected() {
                return Ok(l.channel.clone());
            }
        }
        *link = None;
        let fresh = self.open().await?;
        let ch = fresh.channel.clone();
        *link = Some(fresh);
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
