//! The wake-up listener: a background task on its own pub/sub connection that turns the
//! scripts' `PUBLISH` on `<prefix>:wake` into [`outboxkit_core::Wakeups`] signals, so idle
//! dispatchers in any process react to an enqueue without waiting for their poll interval.

use std::time::Duration;

use futures::StreamExt;
use outboxkit_core::Wakeups;

use crate::store::RedisStore;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl RedisStore {
    /// Start the listener once (lazily, at the first `wake_listener()` inside a tokio
    /// runtime). It stops when the last clone of the store is dropped.
    pub(crate) fn start_listener(&self) {
        let mut slot = self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let clients = self.inner.pubsub.clone();
        let channels = self
            .inner
            .shards
            .iter()
            .map(|p| format!("{p}:wake"))
            .collect();
        let wakeups = self.inner.wakeups.clone();
        *slot = Some(rt.spawn(listen(clients, channels, wakeups)));
    }
}

/// Subscribe to every shard's channel, forward every message as a wake-up, and on any
/// failure reconnect with exponential backoff, to the next client (a cluster's seed nodes
/// in turn: a `PUBLISH` on any node reaches subscribers on every node). Each
/// (re)subscription fires one wake-up: messages published while the connection was down
/// are lost, so listeners should look for work once.
async fn listen(clients: Vec<redis::Client>, channels: Vec<String>, wakeups: Wakeups) {
    let mut backoff = FIRST_BACKOFF;
    for client in clients.iter().cycle() {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channels).await {
                Ok(()) => {
                    backoff = FIRST_BACKOFF;
                    wakeups.wake();
                    let mut messages = pubsub.on_message();
                    while messages.next().await.is_some() {
                        wakeups.wake();
                    }
                    tracing::debug!("outbox wake-up subscription ended; reconnecting");
                }
                Err(e) => tracing::debug!(error = %e, "outbox wake-up subscribe failed"),
            },
            Err(e) => tracing::debug!(error = %e, "outbox wake-up connection failed"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
