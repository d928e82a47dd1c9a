//! Wake-ups across processes: the two background tasks of a store, started with it on the
//! runtime handle it was built with, each restarted by a supervisor if it ever panics.
//!
//! - The **listener** holds a `PgListener` on the outbox's channel and turns each
//!   notification into an in-process wake-up (`outboxkit_core::Wakeups`). It connects when
//!   the first `wake_listener()` is asked for (a store that only enqueues never listens),
//!   on a dedicated one-connection pool built from the store pool's connect options (so it
//!   never takes a connection the application needs). It survives errors: it backs off
//!   (doubling, capped) and reconnects, and after every (re)connect it fires one wake-up,
//!   since notifications sent while it was away are lost: a dispatcher then re-polls at once
//!   instead of at its next poll interval.
//! - The **notifier** sends the `NOTIFY`s owed by [`crate::PostgresStore::notify`] and the
//!   retries of after-commit notifications that failed. PostgreSQL serialises the commits
//!   of all transactions that sent a `NOTIFY` (a database-wide lock held through the
//!   commit's WAL flush), so a `NOTIFY` inside every enqueue transaction caps concurrent
//!   enqueues at about one commit per disk flush. `enqueue_in` cannot see the caller's
//!   commit (so it notifies inside the transaction unless configured otherwise), but
//!   `enqueue` and `enqueue_batch` commit their own statement: after the commit they send
//!   one `NOTIFY` on the same connection, in a transaction of its own that commits without
//!   a disk flush, and wait for it before returning (`PostgresStore::notify_on`), so a
//!   producer that exits right after `enqueue` still wakes the relays. This task has its
//!   own connection (`synchronous_commit = off`). Requests that arrive while one is being
//!   sent are coalesced into one more `NOTIFY` afterwards. A failed send is retried with
//!   backoff; it never fails the enqueue that asked for it. Being a task, it dies with the
//!   process: what it still owes then is found at the relays' next poll.
//! - **Echoes**: every `NOTIFY` sent after this process's dispatchers were woken directly
//!   (`enqueue`, `enqueue_batch`, `notify`, `notify_now`) carries the store's random tag as
//!   its payload, and the listener does not wake anyone for a notification bearing its own
//!   tag: the wake-up it stands for was delivered before it was sent. Without this, every
//!   lone enqueue woke the process's dispatcher twice, and the second wake-up started a
//!   second claim beside the one that was fetching the message (measured on `pg-latency`,
//!   BENCHMARKS.md). A notification with any other payload (another store or process, a
//!   `NOTIFY` inside a caller's transaction, an operator's) wakes as before.
//!
//! Both stop when the store (its last clone) is dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{Entropy, EntropyExt, Wakeups};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use tokio::runtime::Handle;
use tokio::sync::{watch, Notify};

use crate::config::PostgresConfig;

/// The background tasks of one store.
#[derive(Debug)]
pub(crate) struct Wake {
    wakeups: Wakeups,
    /// Set once the first wake listener is handed out: the listener task then connects.
    listen: watch::Sender<bool>,
    /// One permit = one `NOTIFY` owed.
    pending: Arc<Notify>,
    /// The payload of this store's own after-wake `NOTIFY`s (module docs, "Echoes").
    tag: Arc<str>,
    /// Dropped with the store: the tasks see the channel close and exit.
    _stop: watch::Sender<()>,
}

/// What both tasks need to (re)start.
#[derive(Clone)]
struct Setup {
    options: PgConnectOptions,
    channel: String,
    tag: Arc<str>,
    wakeups: Wakeups,
    stop: watch::Receiver<()>,
    backoff: Duration,
    max_backoff: Duration,
}

impl Wake {
    /// Start the listener and notifier tasks of the store on `pool` with `config`, on
    /// `handle`; the store's tag is drawn from `entropy`.
    pub fn start(
        handle: &Handle,
        pool: &PgPool,
        config: &PostgresConfig,
        entropy: &dyn Entropy,
    ) -> Self {
        let wakeups = Wakeups::new();
        let tag: Arc<str> = format!("{:016x}", entropy.next_u64()).into();
        let (stop, stop_rx) = watch::channel(());
        let (listen, listen_rx) = watch::channel(false);
        let pending = Arc::new(Notify::new());
        let setup = Setup {
            options: (*pool.connect_options()).clone(),
            channel: config.channel(),
            tag: tag.clone(),
            wakeups: wakeups.clone(),
            stop: stop_rx,
            backoff: config.listener_backoff,
            max_backoff: config.listener_max_backoff,
        };
        let s = setup.clone();
        supervise(handle, "listener", setup.clone(), move || {
            listener(s.clone(), listen_rx.clone())
        });
        let (s, p) = (setup.clone(), pending.clone());
        supervise(handle, "notifier", setup, move || {
            notifier(s.clone(), p.clone())
        });
        Wake {
            wakeups,
            listen,
            pending,
            tag,
            _stop: stop,
        }
    }

    /// This process's wake-ups.
    pub fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    /// The payload of a `NOTIFY` sent after this process's dispatchers were woken: the
    /// listener of this store does not wake them again for it.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Let the listener task connect and listen (once; later calls change nothing).
    pub fn listen(&self) {
        self.listen
            .send_if_modified(|on| !std::mem::replace(on, true));
    }

    /// Ask for one `NOTIFY`, sent after this call (coalesced with concurrent requests).
    pub fn notify_later(&self) {
        self.pending.notify_one();
    }
}

/// Run `task()` on `handle` until the store is dropped, starting it again (after the
/// backoff) whenever it panics.
fn supervise<F, Fut>(handle: &Handle, name: &'static str, setup: Setup, task: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let inner = handle.clone();
    handle.spawn(async move {
        let mut stop = setup.stop.clone();
        let mut delay = setup.backoff;
        loop {
            let run = inner.spawn(task());
            let abort = run.abort_handle();
            let ended = tokio::select! {
                _ = stop.changed() => {
                    abort.abort();
                    return;
                }
                ended = run => ended,
            };
            match ended {
                // The task returns only when the store is gone.
                Ok(()) => return,
                Err(e) => {
                    tracing::error!(task = name, error = %e, "outbox wake-up task ended; restarting")
                }
            }
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(setup.max_backoff);
        }
    });
}

/// The listener task: waits to be wanted, then listens until the store is dropped.
async fn listener(mut s: Setup, mut wanted: watch::Receiver<bool>) {
    tokio::select! {
        _ = s.stop.changed() => return,
        r = wanted.wait_for(|on| *on) => if r.is_err() { return },
    }
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(s.options.clone());
    let mut delay = s.backoff;
    loop {
        let connected = tokio::select! {
            _ = s.stop.changed() => return,
            r = listen(&pool, &s.channel) => r,
        };
        match connected {
            Ok(mut listener) => {
                delay = s.backoff;
                // Anything sent while we were not listening is lost: re-poll now.
                s.wakeups.wake();
                loop {
                    let r = tokio::select! {
                        _ = s.stop.changed() => return,
                        r = listener.try_recv() => r,
                    };
                    match r {
                        Ok(Some(n)) => {
                            if !is_echo(n.payload(), &s.tag) {
                                s.wakeups.wake();
                            }
                        }
                        // The connection was lost and has been re-established (with its
                        // LISTEN): notifications in between are lost, so wake once.
                        Ok(None) => s.wakeups.wake(),
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
            _ = s.stop.changed() => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(s.max_backoff);
    }
}

/// Whether a notification with `payload` is this store's own (`tag`): its wake-up was
/// delivered in this process before it was sent.
fn is_echo(payload: &str, tag: &str) -> bool {
    payload == tag
}

async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// The notifier task: one `NOTIFY` per permit, retried until it goes through.
async fn notifier(mut s: Setup, pending: Arc<Notify>) {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(s.options.clone().options([("synchronous_commit", "off")]));
    loop {
        tokio::select! {
            _ = s.stop.changed() => return,
            () = pending.notified() => {}
        }
        let mut delay = s.backoff;
        loop {
            // $1 channel, $2 the tag: whoever asked woke this process already.
            let sent = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&s.channel)
                .bind(&*s.tag)
                .execute(&pool)
                .await;
            match sent {
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "outbox wake-up notification failed; retrying");
                    tokio::select! {
                        _ = s.stop.changed() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(s.max_backoff);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(u64);

    impl Entropy for Fixed {
        fn fill(&self, buf: &mut [u8]) {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = self.0.to_le_bytes()[i % 8];
            }
        }
    }

    #[test]
    fn only_the_stores_own_tag_is_an_echo() {
        let tag = format!("{:016x}", Fixed(0x0123_4567_89ab_cdef).next_u64());
        assert_eq!(tag, "0123456789abcdef");
        assert!(is_echo(&tag, &tag));
        // Another store's tag, a NOTIFY inside a caller's transaction, an operator's.
        assert!(!is_echo("fedcba9876543210", &tag));
        assert!(!is_echo("", &tag));
        assert!(!is_echo("0123456789abcde", &tag));
    }
}
