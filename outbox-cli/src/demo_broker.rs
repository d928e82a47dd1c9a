//! The demo's optional broker leg: when NATS (JetStream) answers, every event is also
//! published to a stream of the demo's own, which is removed at the end. Without a broker
//! the demo runs as before.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_broker::NatsTransport;
use outboxkit_core::{Entropy, EntropyExt};
use outboxkit_dispatch::BrokerSink;

use crate::error::CliResult;

/// A JetStream stream the demo publishes to.
#[derive(Debug)]
pub struct BrokerLeg {
    transport: NatsTransport,
    stream: String,
}

impl BrokerLeg {
    /// Connect to `url` and create the demo's stream; `None` (after saying why) when `url` is
    /// `none` or nothing answers there.
    pub async fn start(url: &str, entropy: &dyn Entropy, say: impl Fn(&str)) -> Option<Self> {
        if url == "none" {
            return None;
        }
        let connect = tokio::time::timeout(Duration::from_secs(2), NatsTransport::connect(url));
        let transport = match connect.await {
            Ok(Ok(t)) => t,
            _ => {
                say("no NATS server answered: the broker leg is skipped");
                return None;
            }
        };
        let stream = format!("outbox-demo-{:08x}", entropy.next_u64() as u32);
        let created = transport
            .jetstream()
            .create_stream(outboxkit_broker::async_nats::jetstream::stream::Config {
                name: stream.clone(),
                subjects: vec![format!("{stream}.>")],
                storage: outboxkit_broker::async_nats::jetstream::stream::StorageType::Memory,
                ..Default::default()
            })
            .await;
        if let Err(e) = created {
            say(&format!(
                "NATS has no JetStream ({e}): the broker leg is skipped"
            ));
            return None;
        }
        say(&format!(
            "broker leg: every event is also published to the JetStream stream {stream}"
        ));
        Some(BrokerLeg { transport, stream })
    }

    /// The sink publishing to the stream (`<stream>.<topic>`).
    pub fn sink(&self) -> CliResult<BrokerSink> {
        Ok(BrokerSink::new(
            Arc::new(self.transport.clone()),
            &format!("{}.{{topic}}", self.stream),
        )?)
    }

    /// The stream's name.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// How many messages the stream holds; then remove it.
    pub async fn finish(self) -> u64 {
        let js = self.transport.jetstream();
        let n = match js.get_stream(&self.stream).await {
            Ok(mut s) => s.info().await.map_or(0, |i| i.state.messages),
            Err(_) => 0,
        };
        let _ = js.delete_stream(&self.stream).await;
        n
    }
}
