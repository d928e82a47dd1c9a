//! `outbox relay --broker …`: the broker sink of the relay (NATS JetStream or RabbitMQ).

use std::time::Duration;

use clap::Args;
use outboxkit_core::{BodyFormat, RetryPolicy};
use outboxkit_dispatch::{BrokerSink, DispatcherBuilder};

use crate::error::{CliError, CliResult};
use crate::util::parse_flag_duration;

/// The relay's broker flags.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// Also publish messages to a broker: nats://host:4222 (JetStream; a stream must listen
    /// on the subjects) or amqp://user:pass@host:5672/%2f (RabbitMQ, publisher confirms).
    #[arg(long, env = "OUTBOX_BROKER_URL", hide_env_values = true)]
    broker: Option<String>,
    /// Which topics go to the broker (`*`, `order.*`, or a comma-separated list).
    #[arg(long, default_value = "*")]
    broker_topics: String,
    /// The NATS subject or AMQP routing key, from `{topic}` and `{tenant}`.
    #[arg(long, default_value = "outbox.{topic}")]
    broker_subject: String,
    /// The AMQP exchange to publish to (default: the default exchange, which routes by
    /// queue name). Ignored for NATS.
    #[arg(long, default_value = "")]
    broker_exchange: String,
    /// The sink's consumer name (its deliveries show under this name in the ledger).
    #[arg(long, default_value = "broker")]
    broker_name: String,
    /// Send the envelope {"type","timestamp","data"} or the raw payload.
    #[arg(long, default_value = "envelope", value_parser = ["envelope", "raw"])]
    broker_body: String,
    /// The deadline of one publish and its acknowledgement.
    #[arg(long, default_value = "10s")]
    broker_timeout: String,
}

impl BrokerArgs {
    /// Start the broker transport when `--broker` is given. A malformed URL or a broker that
    /// refuses the credentials stops the relay here; a broker that cannot be reached does
    /// not: the relay starts (webhooks and e-mail flow), `/readyz` and the log say the sink
    /// is unavailable, and the transport connects in the background when the broker is back.
    pub async fn start(&self) -> CliResult<Option<outboxkit_broker::Broker>> {
        let Some(url) = &self.broker else {
            return Ok(None);
        };
        let url = outboxkit_broker::BrokerUrl::parse(url)?;
        // Checked before anything connects.
        parse_flag_duration("broker-timeout", &self.broker_timeout)?;
        let broker = outboxkit_broker::start(&url, &self.broker_exchange)
            .await
            .map_err(|e| CliError::failed(format!("--broker: {e}")))?;
        if !broker.is_connected() {
            tracing::warn!(
                broker = url.kind(),
                sink = %self.broker_name,
                "the broker sink is unavailable: the broker cannot be reached; connecting in the background"
            );
        }
        Ok(Some(broker))
    }

    /// The sink's consumer name.
    pub fn name(&self) -> &str {
        &self.broker_name
    }

    /// Add the sink of a started `broker` to `builder`. Outages are ridden out by the sink's
    /// circuit: deliveries wait without spending attempts while the broker is unreachable.
    pub fn add_to(
        &self,
        builder: DispatcherBuilder,
        broker: Option<&outboxkit_broker::Broker>,
        retry: RetryPolicy,
    ) -> CliResult<DispatcherBuilder> {
        let Some(broker) = broker else {
            return Ok(builder);
        };
        let timeout: Duration = parse_flag_duration("broker-timeout", &self.broker_timeout)?;
        let body = if self.broker_body == "raw" {
            BodyFormat::Raw
        } else {
            BodyFormat::Envelope
        };
        let sink = BrokerSink::new(broker.transport(), &self.broker_subject)?
            .body(body)
            .timeout(timeout)
            .retry(retry);
        tracing::info!(subject = %sink.subject(), "publishing to a broker");
        Ok(builder.broker(&self.broker_name, &self.broker_topics, sink))
    }
}
