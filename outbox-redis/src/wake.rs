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
        let client = self.inner.client.clone();
        let channel = self.wake_channel();
        let wakeups = self.inner.wakeups.clone();
        *slot = Some(rt.spawn(listen(client, channel, wakeups)));
    }
}

/// Subscribe, forward every message as a wake-up, and on any failure reconnect with
/// exponential backoff. Each (re)subscription fires one wake-up: messages published while
/// the connection was down are lost, so listeners should look for work once.
async fn listen(client: redis::Client, channel: String, wakeups: Wakeups) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
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
