//! Retry policies: a fixed schedule or capped exponential backoff, with jitter
//! taken as an argument. Pure: no clock, no random source, no sleeping.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::ids::TenantId;

/// The shortest delay a policy accepts or produces.
const MIN_STEP: Duration = Duration::from_millis(1);
const MAX_STEP: Duration = Duration::from_secs(30 * 24 * 3600);
const MAX_ATTEMPTS: u32 = 1000;

/// How a computed delay is randomised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// The delay as computed.
    None,
    /// A delay in `[d/2, d]` (never below 1 ms).
    Equal,
    /// A delay in `[1 ms, d]`: never zero, so a failure is never retried at once.
    Full,
}

#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Schedule(Vec<Duration>),
    Exponential {
        base: Duration,
        factor: f64,
        cap: Duration,
    },
}

/// A validated retry policy.
///
/// Attempt numbers are 1-based: `delay(1, _)` is the wait after the first attempt failed.
/// `delay(n, _)` is `None` once `n >= max_attempts()`: the delivery is dead.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    shape: Shape,
    max_attempts: u32,
    jitter: Jitter,
}

impl RetryPolicy {
    /// Wait `steps[i]` after attempt `i + 1`; after the last step's retry fails, dead.
    /// So a schedule of five steps allows six attempts. Jitter defaults to none.
    pub fn schedule(steps: Vec<Duration>) -> Result<Self> {
        if steps.is_empty() {
            return Err(Error::misconfigured(
                "retry.schedule",
                "must have at least one step",
            ));
        }
        if steps.len() >= MAX_ATTEMPTS as usize {
            return Err(Error::misconfigured(
                "retry.schedule",
                "must have fewer than 1000 steps",
            ));
        }
        if steps.iter().any(|s| *s < MIN_STEP || *s > MAX_STEP) {
            return Err(Error::misconfigured(
                "retry.schedule",
                "each step must be between 1 ms and 30 days",
            ));
        }
        let max_attempts = steps.len() as u32 + 1;
        Ok(RetryPolicy {
            shape: Shape::Schedule(steps),
            max_attempts,
            jitter: Jitter::None,
        })
    }

    /// `base * factor^(n-1)`, at most `cap`, for at most `max_attempts` attempts. Jitter
    /// defaults to equal.
    pub fn exponential(
        base: Duration,
        factor: f64,
        cap: Duration,
        max_attempts: u32,
    ) -> Result<Self> {
        if base < MIN_STEP || base > MAX_STEP {
            return Err(Error::misconfigured(
                "retry.base",
                "must be between 1 ms and 30 days",
            ));
        }
        if !factor.is_finite() || !(1.0..=100.0).contains(&factor) {
            return Err(Error::misconfigured(
                "retry.factor",
                "must be a number from 1 to 100",
            ));
        }
        if cap < base || cap > MAX_STEP {
            return Err(Error::misconfigured(
                "retry.cap",
                "must be at least the base and at most 30 days",
            ));
        }
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(Error::misconfigured(
                "retry.max_attempts",
                "must be from 1 to 1000",
            ));
        }
        Ok(RetryPolicy {
            shape: Shape::Exponential { base, factor, cap },
            max_attempts,
            jitter: Jitter::Equal,
        })
    }

    /// The webhook default: 1 m, 5 m, 30 m, 2 h, 12 h, then dead (six attempts, ~14.6 h).
    pub fn webhook_default() -> Self {
        let m = |n: u64| Duration::from_secs(60 * n);
        RetryPolicy {
            shape: Shape::Schedule(vec![m(1), m(5), m(30), m(120), m(720)]),
            max_attempts: 6,
            jitter: Jitter::None,
        }
    }

    /// The handler default: exponential from 1 m, factor 2, cap 1 h, 8 attempts, equal
    /// jitter.
    pub fn handler_default() -> Self {
        RetryPolicy {
            shape: Shape::Exponential {
                base: Duration::from_secs(60),
                factor: 2.0,
                cap: Duration::from_secs(3600),
            },
            max_attempts: 8,
            jitter: Jitter::Equal,
        }
    }

    /// The same policy with another jitter.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The same policy with another attempt budget (1–1000). For a schedule, a budget
    /// beyond its steps repeats the last step.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Result<Self> {
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(Error::misconfigured(
                "retry.max_attempts",
                "must be from 1 to 1000",
            ));
        }
        self.max_attempts = max_attempts;
        Ok(self)
    }

    /// The same policy with every delay capped at `cap` (at least 1 ms).
    pub fn with_cap(mut self, cap: Duration) -> Result<Self> {
        if cap < MIN_STEP || cap > MAX_STEP {
            return Err(Error::misconfigured(
                "retry.cap",
                "must be between 1 ms and 30 days",
            ));
        }
        match &mut self.shape {
            Shape::Schedule(steps) => steps.iter_mut().for_each(|s| *s = (*s).min(cap)),
            Shape::Exponential { base, cap: c, .. } => {
                *c = cap;
                *base = (*base).min(cap);
            }
        }
        Ok(self)
    }

    /// Apply a tenant's override.
    pub fn with_override(self, o: &PolicyOverride) -> Result<Self> {
        let mut p = self;
        if let Some(m) = o.max_attempts {
            p = p.with_max_attempts(m)?;
        }
        if let Some(c) = o.cap {
            p = p.with_cap(c)?;
        }
        Ok(p)
    }

    /// The most attempts a delivery gets (the first try included).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The jitter.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The longest delay this policy can produce.
    pub fn max_delay(&self) -> Duration {
        match &self.shape {
            Shape::Schedule(steps) => steps.iter().copied().max().unwrap_or_default(),
            Shape::Exponential { cap, .. } => *cap,
        }
    }

    /// The delay before attempt `attempt + 1`, before jitter; `None` when `attempt` has
    /// spent the budget.
    pub fn base_delay(&self, attempt: u32) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let n = attempt.max(1);
        Some(match &self.shape {
            Shape::Schedule(steps) => {
                let i = (n as usize - 1).min(steps.len() - 1);
                steps[i]
            }
            Shape::Exponential { base, factor, cap } => {
                let exp = i32::try_from(n - 1).unwrap_or(i32::MAX).min(1024);
                let ms = base.as_millis() as f64 * factor.powi(exp);
                let cap_ms = cap.as_millis() as f64;
                Duration::from_millis(if ms.is_finite() {
                    ms.min(cap_ms)
                } else {
                    cap_ms
                } as u64)
            }
        })
    }

    /// The delay before attempt `attempt + 1` with jitter applied from `sample` (uniform in
    /// `[0, 1)`; values outside are clamped). Never below 1 ms. `None` when the budget is
    /// spent.
    pub fn delay(&self, attempt: u32, sample: f64) -> Option<Duration> {
        let d = self.base_delay(attempt)?;
        let s = if sample.is_finite() {
            sample.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let ms = d.as_millis() as f64;
        let jittered = match self.jitter {
            Jitter::None => ms,
            Jitter::Equal => ms / 2.0 + s * (ms / 2.0),
            Jitter::Full => s * ms,
        };
        let min = MIN_STEP.as_millis() as f64;
        Some(Duration::from_millis(
            jittered.clamp(min, ms.max(min)) as u64
        ))
    }
}

/// A tenant's override of the budget and the cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyOverride {
    /// Another attempt budget.
    pub max_attempts: Option<u32>,
    /// Another cap on each delay.
    pub cap: Option<Duration>,
}

/// Where per-tenant overrides come from: a table, or your own callback.
pub trait TenantOverrides: Send + Sync + fmt::Debug + 'static {
    /// The override for `tenant`, if any.
    fn override_for(&self, tenant: &TenantId) -> Option<PolicyOverride>;
}

impl TenantOverrides for HashMap<TenantId, PolicyOverride> {
    fn override_for(&self, tenant: &TenantId) -> Option<PolicyOverride> {
        self.get(tenant).copied()
    }
}

/// A policy plus per-tenant overrides.
#[derive(Clone, Debug)]
pub struct TenantPolicy {
    default: RetryPolicy,
    overrides: Option<Arc<dyn TenantOverrides>>,
}

impl TenantPolicy {
    /// One policy for every tenant.
    pub fn uniform(default: RetryPolicy) -> Self {
        TenantPolicy {
            default,
            overrides: None,
        }
    }

    /// A policy with overrides.
    pub fn with_overrides(default: RetryPolicy, overrides: Arc<dyn TenantOverrides>) -> Self {
        TenantPolicy {
            default,
            overrides: Some(overrides),
        }
    }

    /// The policy of `tenant`. An override that does not validate is ignored (with a
    /// warning): a bad row in a settings table never stops deliveries.
    pub fn for_tenant(&self, tenant: &TenantId) -> RetryPolicy {
        match self.overrides.as_ref().and_then(|o| o.override_for(tenant)) {
            Some(o) => self.default.clone().with_override(&o).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "ignoring an invalid per-tenant retry override");
                self.default.clone()
            }),
            None => self.default.clone(),
        }
    }

    /// The attempt budget a claim applies for this policy: the default's, or the most any
    /// policy allows when per-tenant overrides exist (they cannot be enumerated), so that
    /// claim-time discard never kills a row a tenant may still retry.
    pub fn claim_budget(&self) -> u32 {
        if self.overrides.is_some() {
            MAX_ATTEMPTS
        } else {
            self.default.max_attempts()
        }
    }

    /// The default policy.
    pub fn default_policy(&self) -> &RetryPolicy {
        &self.default
    }
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
