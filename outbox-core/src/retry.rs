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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(n: u64) -> Duration {
        Duration::from_secs(60 * n)
    }

    #[test]
    fn webhook_schedule_walks_then_dies() {
        let p = RetryPolicy::webhook_default();
        let got: Vec<_> = (1..=6).map(|a| p.delay(a, 0.7)).collect();
        assert_eq!(
            got,
            vec![
                Some(m(1)),
                Some(m(5)),
                Some(m(30)),
                Some(m(120)),
                Some(m(720)),
                None
            ]
        );
        assert_eq!(p.max_attempts(), 6);
        let total: Duration = (1..6).filter_map(|a| p.base_delay(a)).sum();
        assert_eq!(total, m(876)); // 14.6 h
    }

    #[test]
    fn exponential_doubles_to_the_cap() {
        let p = RetryPolicy::handler_default().with_jitter(Jitter::None);
        let got: Vec<_> = (1..=8).map(|a| p.delay(a, 0.0)).collect();
        assert_eq!(
            got,
            vec![
                Some(m(1)),
                Some(m(2)),
                Some(m(4)),
                Some(m(8)),
                Some(m(16)),
                Some(m(32)),
                Some(m(60)),
                None
            ]
        );
    }

    #[test]
    fn jitter_table() {
        let p = RetryPolicy::exponential(m(10), 1.0, m(10), 3).unwrap();
        let cases = [
            (Jitter::None, 0.0, m(10)),
            (Jitter::None, 0.99, m(10)),
            (Jitter::Equal, 0.0, m(5)),
            (Jitter::Equal, 0.5, Duration::from_secs(450)),
            (Jitter::Full, 0.0, Duration::from_millis(1)),
            (Jitter::Full, 0.5, m(5)),
            (Jitter::Full, 7.0, m(10)),
            (Jitter::Full, f64::NAN, Duration::from_millis(1)),
        ];
        for (j, s, want) in cases {
            assert_eq!(
                p.clone().with_jitter(j).delay(1, s),
                Some(want),
                "{j:?} {s}"
            );
        }
    }

    #[test]
    fn bad_configuration_is_an_error_not_a_panic() {
        assert!(RetryPolicy::schedule(vec![]).is_err());
        assert!(RetryPolicy::schedule(vec![Duration::ZERO]).is_err());
        assert!(RetryPolicy::schedule(vec![Duration::from_secs(31 * 86_400)]).is_err());
        assert!(RetryPolicy::exponential(Duration::ZERO, 2.0, m(1), 3).is_err());
        assert!(RetryPolicy::exponential(m(1), 0.5, m(1), 3).is_err());
        assert!(RetryPolicy::exponential(m(1), f64::NAN, m(1), 3).is_err());
        assert!(RetryPolicy::exponential(m(2), 2.0, m(1), 3).is_err());
        assert!(RetryPolicy::exponential(m(1), 2.0, m(2), 0).is_err());
        let e = RetryPolicy::handler_default()
            .with_max_attempts(5000)
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Misconfigured);
    }

    #[test]
    fn steps_and_caps_below_one_millisecond_are_refused() {
        let us = Duration::from_micros;
        let rows: [(&str, Result<RetryPolicy>, bool); 8] = [
            (
                "schedule 500 µs",
                RetryPolicy::schedule(vec![us(500)]),
                false,
            ),
            (
                "schedule 999 µs",
                RetryPolicy::schedule(vec![m(1), us(999)]),
                false,
            ),
            ("schedule 1 ms", RetryPolicy::schedule(vec![us(1000)]), true),
            (
                "base 1 ns",
                RetryPolicy::exponential(Duration::from_nanos(1), 2.0, m(1), 3),
                false,
            ),
            (
                "base 1 ms",
                RetryPolicy::exponential(us(1000), 2.0, m(1), 3),
                true,
            ),
            (
                "cap 1 ns",
                RetryPolicy::webhook_default().with_cap(Duration::from_nanos(1)),
                false,
            ),
            (
                "cap 999 µs",
                RetryPolicy::handler_default().with_cap(us(999)),
                false,
            ),
            (
                "cap 1 ms",
                RetryPolicy::handler_default().with_cap(us(1000)),
                true,
            ),
        ];
        for (name, r, ok) in rows {
            match r {
                Ok(p) => {
                    assert!(ok, "{name} was accepted");
                    assert!(p.delay(1, 0.0) >= Some(us(1000)), "{name}");
                }
                Err(e) => {
                    assert!(!ok, "{name} was refused: {e}");
                    assert_eq!(e.kind(), crate::ErrorKind::Misconfigured, "{name}");
                    assert!(e.field().is_some_and(|f| f.starts_with("retry.")), "{name}");
                }
            }
        }
        // A per-tenant override below the minimum is ignored, not applied.
        let o = PolicyOverride {
            max_attempts: None,
            cap: Some(Duration::from_nanos(1)),
        };
        assert!(RetryPolicy::webhook_default().with_override(&o).is_err());
    }

    #[test]
    fn jitter_never_goes_below_one_millisecond() {
        let ms = Duration::from_millis;
        let one = RetryPolicy::schedule(vec![ms(1)]).unwrap();
        let three = RetryPolicy::schedule(vec![ms(3)]).unwrap();
        let rows = [
            (&one, Jitter::Equal, 0.0, ms(1)),
            (&one, Jitter::Equal, 0.99, ms(1)),
            (&one, Jitter::Full, 0.0, ms(1)),
            (&one, Jitter::Full, 0.4, ms(1)),
            (&one, Jitter::None, 0.0, ms(1)),
            (&three, Jitter::Full, 0.0, ms(1)),
            (&three, Jitter::Full, 0.5, ms(1)),
            (&three, Jitter::Equal, 0.0, ms(1)),
            (&three, Jitter::Equal, 0.99, ms(2)),
        ];
        for (p, j, s, want) in rows {
            assert_eq!(
                p.clone().with_jitter(j).delay(1, s),
                Some(want),
                "{j:?} {s}"
            );
        }
    }

    #[test]
    fn tenant_overrides_apply() {
        let mut table = HashMap::new();
        let t = TenantId::new("small").unwrap();
        table.insert(
            t.clone(),
            PolicyOverride {
                max_attempts: Some(2),
                cap: Some(m(3)),
            },
        );
        let tp = TenantPolicy::with_overrides(RetryPolicy::webhook_default(), Arc::new(table));
        let p = tp.for_tenant(&t);
        assert_eq!(p.max_attempts(), 2);
        assert_eq!(p.delay(1, 0.0), Some(m(1)));
        assert_eq!(p.delay(2, 0.0), None);
        assert_eq!(tp.for_tenant(&TenantId::default()).max_attempts(), 6);
        let capped = RetryPolicy::webhook_default().with_cap(m(3)).unwrap();
        assert_eq!(capped.delay(5, 0.0), Some(m(3)));
        let longer = RetryPolicy::webhook_default().with_max_attempts(8).unwrap();
        assert_eq!(
            longer.delay(7, 0.0),
            Some(m(720)),
            "a longer budget repeats the last step"
        );
    }

    fn policies() -> impl Strategy<Value = RetryPolicy> {
        let jitter = prop_oneof![Just(Jitter::None), Just(Jitter::Equal), Just(Jitter::Full)];
        let exp = (
            1u64..100_000,
            1.0f64..10.0,
            1u64..10_000_000,
            1u32..=1000,
            jitter.clone(),
        )
            .prop_map(|(base, factor, extra, max, j)| {
                RetryPolicy::exponential(
                    Duration::from_millis(base),
                    factor,
                    Duration::from_millis(base + extra),
                    max,
                )
                .unwrap()
                .with_jitter(j)
            });
        let sched = (
            proptest::collection::vec(1u64..2_000_000_000, 1..20),
            jitter,
        )
            .prop_map(|(s, j)| {
                RetryPolicy::schedule(s.into_iter().map(Duration::from_millis).collect())
                    .unwrap()
                    .with_jitter(j)
            });
        prop_oneof![exp, sched]
    }

    proptest! {
        #[test]
        fn delays_never_exceed_the_cap(p in policies(), attempt in 0u32..=u32::MAX, s in 0.0f64..1.0) {
            if let Some(d) = p.delay(attempt, s) {
                prop_assert!(d <= p.max_delay());
            }
        }

        #[test]
        fn equal_jitter_stays_in_half_to_full(p in policies(), attempt in 1u32..2000, s in 0.0f64..1.0) {
            let p = p.with_jitter(Jitter::Equal);
            if let (Some(d), Some(base)) = (p.delay(attempt, s), p.base_delay(attempt)) {
                prop_assert!(d <= base);
                prop_assert!(d.as_millis() * 2 + 1 >= base.as_millis());
            }
        }

        #[test]
        fn delays_are_at_least_one_millisecond(p in policies(), attempt in 0u32..2000, s in proptest::num::f64::ANY) {
            if let Some(d) = p.delay(attempt, s) {
                prop_assert!(d >= MIN_STEP);
            }
        }

        #[test]
        fn the_budget_always_ends_in_dead(p in policies()) {
            prop_assert!(p.delay(p.max_attempts(), 0.5).is_none());
            prop_assert!(p.delay(u32::MAX, 0.5).is_none());
            if p.max_attempts() > 1 {
                prop_assert!(p.delay(p.max_attempts() - 1, 0.5).is_some());
            }
        }

        #[test]
        fn huge_attempt_numbers_do_not_overflow(attempt in 0u32..=u32::MAX, max in 1u32..=1000) {
            let p = RetryPolicy::exponential(Duration::from_secs(1), 100.0, Duration::from_secs(3600), max).unwrap();
            let _ = p.delay(attempt, 0.3);
            let _ = RetryPolicy::webhook_default().delay(attempt, 0.3);
        }

        #[test]
        fn schedules_end_after_their_last_step(steps in proptest::collection::vec(1u64..1_000_000, 1..30)) {
            let p = RetryPolicy::schedule(steps.iter().copied().map(Duration::from_millis).collect()).unwrap();
            for (i, s) in steps.iter().enumerate() {
                prop_assert_eq!(p.delay(i as u32 + 1, 0.9), Some(Duration::from_millis(*s)));
            }
            prop_assert_eq!(p.delay(steps.len() as u32 + 1, 0.9), None);
        }
    }
}
