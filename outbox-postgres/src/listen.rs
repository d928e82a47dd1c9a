//! Wake-ups across processes: a background task holding a `PgListener` on the outbox's
//! channel turns each notification into an in-process wake-up (`outboxkit_core::Wakeups`).
//!
//! The task starts on the first `wake_listener()` call (it needs a tokio runtime), uses a
//! dedicated one-connection pool built from the store pool's connect options (so it never
//! takes a connection the application needs), and survives errors: it backs off
//! (doubling, capped) and reconnects. After every (re)connect it fires one wake-up, since
//! notifications sent while it was away are lost: a dispatcher then re-polls at once instead
//! of at its next poll interval. It stops when the store is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use outboxkit_core::Wakeups;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::sync::watch;

use crate::config::PostgresConfig;

/// The lazily started listener task of one store.
#[derive(Debug)]
pub(crate) struct Listener {
    started: AtomicBool,
    /// Dropped with the store: the task sees the channel close and exits.
    stop: watch::Sender<()>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Listener {
    pub fn new(config: &PostgresConfig) -> Self {
        Listener {
            started: AtomicBool::new(false),
            stop: watch::channel(()).0,
            backoff: config.listener_backoff,
            max_backoff: config.listener_max_backoff,
        }
    }

    /// Start the task unless it runs already. Outside a tokio runtime this does nothing
    /// (listeners then see only this process's own wake-ups) and a later call may start it.
    pub fn ensure_started(&self, pool: &PgPool, channel: &str, wakeups: &Wakeups) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let task = Task {
            options: (*pool.connect_options()).clone(),
            channel: channel.to_owned(),
            wakeups: wakeups.clone(),
            stop: self.stop.subscribe(),
            backoff: self.backoff,
            max_backoff: self.max_backoff,
        };
        handle.spawn(task.run());
    }
}

struct Task {
    options: PgConnectOptions,
    channel: String,
    wakeups: Wakeups,
    stop: watch::Receiver<()>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Task {
    async fn run(mut self) {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(self.options.clone());
        let mut delay = self.backoff;
        loop {
            let connected = tokio::select! {
                _ = self.stop.changed() => return,
                r = listen(&pool, &self.channel) => r,
            };
            match connected {
                Ok(mut listener) => {
                    delay = self.backoff;
                    // Anything sent while we were not listening is lost: re-poll now.
                    self.wakeups.wake();
                    loop {
                        let r = tokio::select! {
                            _ = self.stop.changed() => return,
                            r = listener.try_recv() => r,
                        };
                        match r {
                            Ok(Some(_)) => self.wakeups.wake(),
                            // The connection was lost and has been re-established (with its
                            // LISTEN): notifications in between are lost, so wake once.
                            Ok(None) => self.wakeups.wake(),
                            Err(e) => {
                                tracing::warn!(error = %e, "outbox wake-up listener failed; reconnecting");
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "outbox wake-up listener cannot listen; retrying");
                }
            }
            tokio::select! {
                _ = self.stop.changed() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(self.max_backoff);
        }
    }
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}
