//! In-process wake-ups: a store signals "new work may be due" and idle dispatchers stop
//! waiting for their poll interval.

use std::sync::Arc;

use tokio::sync::watch;

/// The sending side, held by a store.
#[derive(Clone, Debug)]
pub struct Wakeups(Arc<watch::Sender<u64>>);

impl Default for Wakeups {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeups {
    /// A new signal.
    pub fn new() -> Self {
        Wakeups(Arc::new(watch::channel(0).0))
    }

    /// Wake every listener (a listener that is not waiting sees it at its next wait).
    pub fn wake(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A new listener.
    pub fn listener(&self) -> WakeListener {
        WakeListener(self.0.subscribe())
    }
}

/// The receiving side, held by a dispatcher.
#[derive(Debug)]
pub struct WakeListener(watch::Receiver<u64>);

impl WakeListener {
    /// Resolve at the next wake-up since the last call (at once if one came in between).
    /// Never resolves once the store is gone.
    pub async fn woken(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_between_waits_is_not_lost() {
        let w = Wakeups::new();
        let mut l = w.listener();
        w.wake();
        tokio::time::timeout(std::time::Duration::from_secs(5), l.woken())
            .await
            .unwrap();
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), l.woken()).await;
        assert!(
            pending.is_err(),
            "no second wake-up without a second signal"
        );
    }
}
