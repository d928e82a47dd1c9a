//! Sleeping on a [`Clock`]'s time: the one capability the dispatcher needs that the core's
//! contract does not have (the core owns no timer).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{Clock, SystemClock, Timestamp};

/// A [`Clock`] that can also wait until one of its own instants.
///
/// # Contract
/// - `sleep_until(t)` MUST return once `now() >= t` (promptly for a manual clock that is
///   advanced past `t`), and MAY return early only when the clock cannot wait that long.
#[async_trait]
pub trait Timer: Clock {
    /// Wait until `now() >= deadline`.
    async fn sleep_until(&self, deadline: Timestamp);
}

/// A shared [`Timer`].
pub type DynTimer = dyn Timer;

#[async_trait]
impl Timer for SystemClock {
    async fn sleep_until(&self, deadline: Timestamp) {
        loop {
            let now = self.now();
            if now >= deadline {
                return;
            }
            // Wall time may jump; re-check after each sleep rather than trusting one timer.
            let wait = deadline.duration_since(now).min(Duration::from_secs(60));
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }
}

#[async_trait]
impl<T: Timer + ?Sized> Timer for Arc<T> {
    async fn sleep_until(&self, deadline: Timestamp) {
        (**self).sleep_until(deadline).await
    }
}

#[async_trait]
impl<T: Timer + ?Sized> Timer for Box<T> {
    async fn sleep_until(&self, deadline: Timestamp) {
        (**self).sleep_until(deadline).await
    }
}

/// Conveniences over any [`Timer`].
#[async_trait]
pub trait TimerExt: Timer {
    /// Wait for `d` of this clock's time.
    async fn sleep(&self, d: Duration) {
        let deadline = self.now().saturating_add(d);
        self.sleep_until(deadline).await
    }
}

impl<T: Timer + ?Sized> TimerExt for T {}
