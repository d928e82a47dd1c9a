//! The after-commit notifier of `enqueue` and `enqueue_batch`.
//!
//! PostgreSQL serialises the commits of all transactions that sent a `NOTIFY` (a database-wide
//! lock held through the commit's WAL flush), so a `NOTIFY` inside every enqueue transaction
//! caps concurrent enqueues at about one commit per disk flush. `enqueue_in` has no choice (it
//! cannot see the caller's commit, and the wake-up must not come before it), but `enqueue`
//! and `enqueue_batch` commit their own statement: after the commit they ask this notifier,
//! a background task with its own connection (`synchronous_commit = off`: a lost wake-up
//! hint needs no disk flush), to send one `NOTIFY`. Requests that arrive while one is being
//! sent are coalesced into one more `NOTIFY` afterwards, so every enqueue is followed by a
//! notification sent after its commit, and there are never more than one per enqueue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::sync::{watch, Notify};

use crate::config::PostgresConfig;

/// The lazily started notifier task of one store.
#[derive(Debug)]
pub(crate) struct Notifier {
    started: AtomicBool,
    pending: Arc<Notify>,
    /// Dropped with the store: the task sees the channel close and exits.
    stop: watch::Sender<()>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Notifier {
    pub fn new(config: &PostgresConfig) -> Self {
        Notifier {
            started: AtomicBool::new(false),
            pending: Arc::new(Notify::new()),
            stop: watch::channel(()).0,
            backoff: config.listener_backoff,
            max_backoff: config.listener_max_backoff,
        }
    }

    /// Ask for one `NOTIFY` on `channel`, sent after this call (coalesced with concurrent
    /// requests). Returns `false` outside a tokio runtime, where nothing can be sent later:
    /// the caller then notifies itself.
    pub fn request(&self, pool: &PgPool, channel: &str) -> bool {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if !self.started.swap(true, Ordering::SeqCst) {
            let options = (*pool.connect_options())
                .clone()
                .options([("synchronous_commit", "off")]);
            let task = Task {
                options,
                channel: channel.to_owned(),
                pending: self.pending.clone(),
                stop: self.stop.subscribe(),
                backoff: self.backoff,
                max_backoff: self.max_backoff,
            };
            handle.spawn(task.run());
        }
        self.pending.notify_one();
        true
    }
}

struct Task {
    options: PgConnectOptions,
    channel: String,
    pending: Arc<Notify>,
    stop: watch::Receiver<()>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Task {
    async fn run(mut self) {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(self.options.clone());
        loop {
            tokio::select! {
                _ = self.stop.changed() => return,
                () = self.pending.notified() => {}
            }
            // A request is owed: send it, retrying (with backoff) until it goes through.
            let mut delay = self.backoff;
            loop {
                let sent = sqlx::query("SELECT pg_notify($1, '')")
                    .bind(&self.channel)
                    .execute(&pool)
                    .await;
                match sent {
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "outbox wake-up notification failed; retrying");
                        tokio::select! {
                            _ = self.stop.changed() => return,
                            () = tokio::time::sleep(delay) => {}
                        }
                        delay = (delay * 2).min(self.max_backoff);
                    }
                }
            }
        }
    }
}
