//! The wake-up listener: a background task on its own connection that turns the scripts'
//! `PUBLISH` on `<prefix>:wake` into [`outboxkit_core::Wakeups`] signals, so idle
//! dispatchers in any process react to an enqueue without waiting for their poll interval.
//!
//! It starts at the first `wake_listener()` (a store that only enqueues never subscribes),
//! under a supervisor that starts it again (after a backoff) if it ever panics, and stops
//! when the last clone of the store is dropped. Its connection speaks RESP3 (pub/sub
//! messages arrive as pushes on an ordinary connection, which also takes commands), is
//! named `outbox-wake:<prefix>` (`CLIENT SETNAME`, so an operator finds it in
//! `CLIENT LIST`), and is checked with a `PING` every [`HEARTBEAT`], so a connection that
//! died without a word (a half-open TCP connection) is noticed too. Whenever the
//! connection is lost it reconnects with exponential backoff (to the next client: a
//! cluster's seed nodes in turn, since a `PUBLISH` on any node reaches subscribers on every
//! node), and after every (re)subscription it fires one wake-up: messages published while
//! it was away are lost, so dispatchers look for work once instead of at their next poll.

use std::time::Duration;

use outboxkit_core::Wakeups;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, RedisResult};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::store::RedisStore;

const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often the listener `PING`s its connection to find out that it died silently.
const HEARTBEAT: Duration = Duration::from_secs(15);

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
        let config = &self.inner.config;
        let setup = Setup {
            clients: self.inner.pubsub.iter().map(resp3).collect(),
            channels: self
                .inner
                .shards
                .iter()
                .map(|p| format!("{p}:wake"))
                .collect(),
            name: client_name(&config.prefix),
            wakeups: self.inner.wakeups.clone(),
            connection: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(config.connection_timeout))
                .set_response_timeout(Some(config.response_timeout)),
        };
        *slot = Some(rt.spawn(supervise(setup)));
    }
}

/// The name of the listener's connection: `outbox-wake:<prefix>`, with every character
/// Redis refuses in a client name (spaces, control and non-ASCII characters) as `_`.
pub(crate) fn client_name(prefix: &str) -> String {
    let prefix: String = prefix
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    format!("outbox-wake:{prefix}")
}

/// The same server with the RESP3 protocol (pub/sub on an ordinary connection).
fn resp3(client: &redis::Client) -> redis::Client {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(settings)).unwrap_or_else(|_| client.clone())
}

/// What the listener needs to (re)start.
#[derive(Clone)]
struct Setup {
    clients: Vec<redis::Client>,
    channels: Vec<String>,
    name: String,
    wakeups: Wakeups,
    connection: AsyncConnectionConfig,
}

/// Aborts the task when dropped: the listener dies with its supervisor.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Run the listener until the store is dropped (which aborts this task and so the
/// listener), starting it again after a backoff whenever it panics.
async fn supervise(setup: Setup) {
    let mut delay = FIRST_BACKOFF;
    loop {
        let mut run = AbortOnDrop(tokio::spawn(listen(setup.clone())));
        match (&mut run.0).await {
            // The listener never returns on its own.
            Ok(()) => return,
            Err(e) if e.is_cancelled() => return,
            Err(e) => {
                tracing::error!(error = %e, "outbox wake-up listener panicked; restarting");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_BACKOFF);
    }
}

/// Subscribe, forward, and on any failure reconnect with exponential backoff to the next
/// client.
async fn listen(s: Setup) {
    let mut backoff = FIRST_BACKOFF;
    for client in s.clients.iter().cycle() {
        match subscription(client, &s, &mut backoff).await {
            Ok(()) => tracing::debug!("outbox wake-up connection closed; reconnecting"),
            Err(e) => tracing::debug!(error = %e, "outbox wake-up connection failed; reconnecting"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connection's life: connect, name it, subscribe (then reset `backoff` and wake
/// once), wake at every message, and return when the connection is lost.
async fn subscription(
    client: &redis::Client,
    s: &Setup,
    backoff: &mut Duration,
) -> RedisResult<()> {
    let (tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    let config = s.connection.clone().set_push_sender(tx);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(&s.name)
        .exec_async(&mut conn)
        .await?;
    conn.subscribe(&s.channels).await?;
    *backoff = FIRST_BACKOFF;
    s.wakeups.wake();
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            push = pushes.recv() => match push.map(|p| p.kind) {
                None | Some(PushKind::Disconnection) => return Ok(()),
                Some(PushKind::Message) => s.wakeups.wake(),
                Some(_) => {}
            },
            _ = heartbeat.tick() => {
                redis::cmd("PING").exec_async(&mut conn).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::client_name;

    #[test]
    fn client_name_keeps_the_prefix_and_replaces_what_redis_refuses() {
        assert_eq!(client_name("{outbox}"), "outbox-wake:{outbox}");
        assert_eq!(client_name("a b\n{é}"), "outbox-wake:a_b_{_}");
    }
}
