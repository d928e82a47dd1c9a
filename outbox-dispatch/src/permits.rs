//! Rate-limit permits taken through the store ([`DeliveryStore::take_permits`]), so an
//! endpoint's rate holds across every dispatcher on the store, not per process.
//!
//! The calls are batched per endpoint: a delivery that needs a permit joins its endpoint's
//! queue, and one task per endpoint takes permits for everything queued at once (the ready
//! deliveries of a batch reach the gate together, so a batch costs one round trip). The
//! first `granted` waiters start; the others wait, spread over the windows the grants they
//! lack will need. A grant that comes back later than [`FRESH`] after the `now` it was taken
//! at is not used (its starts would land later than the store recorded them); a store error
//! sends nothing either (fail closed). Either way the delivery waits and nothing is lost.
//!
//! [`DeliveryStore::take_permits`]: outboxkit_core::DeliveryStore::take_permits

use foldhash::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{DynStore, EndpointId, TenantId, PERMIT_WINDOW};
use tokio::sync::oneshot;

use crate::timer::DynTimer;

/// The longest a permit call may take for its grants to be used: the store records a grant at
/// the `now` the call was made with, so a start after a slow call lands later than recorded,
/// and the one-second window shrinks by the call's time. Past this the starts wait instead.
pub(crate) const FRESH: Duration = Duration::from_millis(100);

/// What a delivery that asked for a permit may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Start now.
    Go,
    /// Over the rate (across every dispatcher): a permit may be free after this long.
    RateLimited(Duration),
    /// The store did not answer, or answered too late: try again after this long.
    Failed(Duration),
}

type Key = (TenantId, EndpointId);

#[derive(Default)]
struct Queue {
    waiting: Vec<oneshot::Sender<Grant>>,
    /// A task is taking permits for this endpoint.
    taking: bool,
}

/// The store's permits, per endpoint, shared by every delivery task of one dispatcher.
#[derive(Default)]
pub(crate) struct StorePermits {
    queues: Mutex<HashMap<Key, Queue>>,
}

impl std::fmt::Debug for StorePermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePermits").finish_non_exhaustive()
    }
}

impl StorePermits {
    /// Take one start permit for `endpoint` under `rate` per second; `retry` is how long a
    /// delivery waits after a failed call.
    pub(crate) async fn take(
        self: &Arc<Self>,
        store: &Arc<DynStore>,
        clock: &Arc<DynTimer>,
        key: (TenantId, EndpointId, u32),
        retry: Duration,
    ) -> Grant {
        let (tenant, endpoint, rate) = key;
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            let q = queues.entry((tenant.clone(), endpoint)).or_default();
            q.waiting.push(tx);
            !std::mem::replace(&mut q.taking, true)
        };
        if lead {
            let (this, store, clock) = (self.clone(), store.clone(), clock.clone());
            tokio::spawn(async move {
                let mut guard = Taking {
                    permits: &this,
                    key: (tenant.clone(), endpoint),
                    armed: true,
                };
                // Let the rest of the batch join before the first call.
                tokio::task::yield_now().await;
                this.serve(&*store, &*clock, (tenant, endpoint), rate, retry)
                    .await;
                guard.armed = false;
            });
        }
        // A dropped sender (the task was cancelled) sends nothing: wait and try again.
        rx.await.unwrap_or(Grant::Failed(retry))
    }

    /// Take permits for everything queued for the endpoint until nothing is.
    async fn serve(
        &self,
        store: &DynStore,
        clock: &DynTimer,
        key: Key,
        rate: u32,
        retry: Duration,
    ) {
        loop {
            let waiting = {
                let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
                let Some(q) = queues.get_mut(&key) else {
                    return;
                };
                if q.waiting.is_empty() {
                    queues.remove(&key);
                    return;
                }
                std::mem::take(&mut q.waiting)
            };
            let want = u32::try_from(waiting.len()).unwrap_or(u32::MAX);
            let now = clock.now();
            let answer = store.take_permits(&key.0, key.1, rate, want, now).await;
            let late = clock.now().duration_since(now) > FRESH;
            let grants = match answer {
                Ok(p) if !late => spread(p.granted, p.wait(now), rate, waiting.len()),
                Ok(p) => {
                    tracing::warn!(endpoint = %key.1, "a rate-limit permit call answered too late; its starts wait");
                    let wait = p.wait(now).max(retry);
                    vec![Grant::Failed(wait); waiting.len()]
                }
                Err(e) => {
                    tracing::warn!(error = %e, endpoint = %key.1, "taking rate-limit permits failed; the deliveries wait");
                    vec![Grant::Failed(retry); waiting.len()]
                }
            };
            for (tx, g) in waiting.into_iter().zip(grants) {
                let _ = tx.send(g);
            }
        }
    }
}

/// Clears an endpoint's queue when its task is cancelled (a task that ends normally has
/// removed it itself), failing anyone still queued, so the next delivery starts a new task.
struct Taking<'a> {
    permits: &'a StorePermits,
    key: Key,
    armed: bool,
}

impl Drop for Taking<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut queues = self
            .permits
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        queues.remove(&self.key);
    }
}

/// The grants of one call over `n` waiters: the first `granted` go; the `j`-th refused one
/// waits until the next permit frees plus one window for every `rate` refused before it
/// (the earliest its permit can come back), so a backlog does not all come back at once.
fn spread(granted: u32, wait: Duration, rate: u32, n: usize) -> Vec<Grant> {
    let granted = granted as usize;
    let rate = rate.max(1) as usize;
    (0..n)
        .map(|i| {
            if i < granted {
                Grant::Go
            } else {
                let windows = u32::try_from((i - granted) / rate).unwrap_or(u32::MAX);
                Grant::RateLimited(wait.saturating_add(PERMIT_WINDOW.saturating_mul(windows)))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_waiters_are_spread_over_the_windows_they_need() {
        let ms = Duration::from_millis;
        let got = spread(2, ms(300), 2, 7);
        assert_eq!(
            got,
            vec![
                Grant::Go,
                Grant::Go,
                Grant::RateLimited(ms(300)),
                Grant::RateLimited(ms(300)),
                Grant::RateLimited(ms(1300)),
                Grant::RateLimited(ms(1300)),
                Grant::RateLimited(ms(2300)),
            ]
        );
    }
}
