//! Paused consumers (`EndpointStore::set_consumer_status`): a run's view of which consumers
//! are paused, read from the store before its first claim and then at most once a second,
//! so a claim's allowlist leaves them out and a claimed delivery of one found paused before
//! it starts goes back unstarted, attempt refunded.
//!
//! The store holds a paused consumer's pending deliveries itself; this view only covers the
//! ones it cannot hold: a delivery in flight when the pause lands that comes back as a retry
//! (pending, not held), and claims made before the pause was seen. The view is at most a
//! second (one refresh) stale.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use outboxkit_core::endpoint::ConsumerStatus;
use outboxkit_core::ids::ConsumerName;
use outboxkit_core::store::DynStore;
use outboxkit_core::Stopwatch;

/// How often the view is read again from the store.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// Which consumers are paused, as last read.
#[derive(Debug, Default)]
pub(crate) struct PausedConsumers {
    state: Mutex<View>,
}

#[derive(Debug, Default)]
struct View {
    read_at: Option<Stopwatch>,
    paused: BTreeSet<ConsumerName>,
}

impl PausedConsumers {
    /// Read the consumers again when the view is older than [`REFRESH`] (a failed read keeps
    /// the old view and is tried at the next claim).
    pub(crate) async fn refresh(&self, store: &DynStore) {
        {
            let view = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if view
                .read_at
                .as_ref()
                .is_some_and(|at| at.elapsed() < REFRESH)
            {
                return;
            }
        }
        let started = Stopwatch::start();
        match store.list_consumers().await {
            Ok(all) => {
                let paused = all
                    .into_iter()
                    .filter(|c| c.status == ConsumerStatus::Paused)
                    .map(|c| c.name)
                    .collect();
                let mut view = self.state.lock().unwrap_or_else(|p| p.into_inner());
                *view = View {
                    read_at: Some(started),
                    paused,
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the consumers' pause status failed; keeping the last view");
            }
        }
    }

    /// Whether `name` was paused when last read.
    pub(crate) fn is_paused(&self, name: &ConsumerName) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .paused
            .contains(name)
    }
}
