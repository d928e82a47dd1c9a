//! Keeping a running handler's lease alive: a heartbeat through `DeliveryStore::extend`
//! before the lease runs out, and cancellation of the handler when the lease is lost.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shared;
use outboxkit_core::claim::Lease;

/// The lease of one running delivery, as the heartbeat keeps it.
#[derive(Debug)]
pub(crate) struct LiveLease {
    lease: Mutex<Lease>,
    lost: AtomicBool,
}

impl LiveLease {
    pub(crate) fn new(lease: Lease) -> Self {
        LiveLease {
            lease: Mutex::new(lease),
            lost: AtomicBool::new(false),
        }
    }

    fn get(&self) -> Lease {
        self.lease.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `extend` answered `LeaseLost`: another worker has the delivery.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The latest lease (its end moved by every heartbeat).
    pub(crate) fn into_lease(self) -> Lease {
        self.lease.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

/// How long before the lease ends the heartbeat extends it: a third of the lease.
pub(crate) fn beat_ahead(lease: Duration) -> Duration {
    lease / 3
}

/// Extend `live` by the configured lease whenever a third of it is left, until the caller
/// stops polling (the handler ended). When the store answers `LeaseLost`, mark it lost,
/// cancel the handler's context and stop beating (never returns). Other store errors are
/// logged and retried after a short real-time pause: the lease may still be saved.
pub(crate) async fn keep_alive(
    shared: &Shared,
    live: &LiveLease,
    cancel: &CancellationToken,
) -> Infallible {
    let by = shared.config.lease;
    loop {
        let current = live.get();
        shared
            .clock
            .sleep_until(current.until.saturating_sub(beat_ahead(by)))
            .await;
        match shared.store.extend(&current, by).await {
            Ok(extended) => {
                *live.lease.lock().unwrap_or_else(|p| p.into_inner()) = extended;
            }
            Err(e) if e.is_lease_lost() => {
                tracing::warn!(delivery_id = %current.delivery_id, "the lease was lost; cancelling the handler");
                live.lost.store(true, Ordering::SeqCst);
                cancel.cancel();
                return std::future::pending().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, delivery_id = %current.delivery_id, "extending the lease failed; trying again");
                tokio::time::sleep(shared.config.poll_interval.min(Duration::from_secs(1))).await;
            }
        }
    }
}
