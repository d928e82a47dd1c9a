//! Retention windows: a default window for every tenant plus per-tenant overrides (seed 001
//! `retentionDays`). Core turns a policy and the current time into per-tenant cutoffs; stores
//! only compare timestamps.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::ids::TenantId;
use crate::time::Timestamp;

/// The longest retention window accepted (100 years).
pub const MAX_RETENTION: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// How long finished deliveries are kept: a default window and per-tenant overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    default: Duration,
    tenants: BTreeMap<TenantId, Duration>,
}

impl RetentionPolicy {
    /// Keep every tenant's finished deliveries for `default`.
    pub fn new(default: Duration) -> Self {
        RetentionPolicy {
            default,
            tenants: BTreeMap::new(),
        }
    }

    /// Keep `tenant`'s finished deliveries for `window` instead of the default.
    pub fn tenant(mut self, tenant: TenantId, window: Duration) -> Self {
        self.tenants.insert(tenant, window);
        self
    }

    /// Check every window (at most [`MAX_RETENTION`]).
    pub fn validate(&self) -> Result<()> {
        if self.default > MAX_RETENTION {
            return Err(Error::invalid_input(
                "older_than",
                "must be at most 100 years",
            ));
        }
        if self.tenants.values().any(|w| *w > MAX_RETENTION) {
            return Err(Error::invalid_input(
                "tenant_window",
                "must be at most 100 years",
            ));
        }
        Ok(())
    }

    /// The default window.
    pub fn default_window(&self) -> Duration {
        self.default
    }

    /// The window that applies to `tenant`.
    pub fn window_for(&self, tenant: &TenantId) -> Duration {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }

    /// The per-tenant overrides.
    pub fn overrides(&self) -> &BTreeMap<TenantId, Duration> {
        &self.tenants
    }

    /// The cutoffs at `now`: rows finished before `now - window` are expired.
    pub fn cutoffs(&self, now: Timestamp) -> RetentionCutoffs {
        RetentionCutoffs {
            default: now.saturating_sub(self.default),
            tenants: self
                .tenants
                .iter()
                .map(|(t, w)| (t.clone(), now.saturating_sub(*w)))
                .collect(),
        }
    }
}

/// Per-tenant purge cutoffs, computed by [`RetentionPolicy::cutoffs`]: what a store compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionCutoffs {
    /// The cutoff of every tenant without an override.
    pub default: Timestamp,
    /// Overrides by tenant.
    pub tenants: BTreeMap<TenantId, Timestamp>,
}

impl RetentionCutoffs {
    /// One cutoff for every tenant.
    pub fn uniform(before: Timestamp) -> Self {
        RetentionCutoffs {
            default: before,
            tenants: BTreeMap::new(),
        }
    }

    /// The cutoff of `tenant`.
    pub fn before(&self, tenant: &TenantId) -> Timestamp {
        self.tenants.get(tenant).copied().unwrap_or(self.default)
    }

    /// The latest cutoff of all: nothing finished at or after it is expired for any tenant.
    pub fn latest(&self) -> Timestamp {
        self.tenants
            .values()
            .copied()
            .fold(self.default, std::cmp::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_unix_millis(ms).unwrap()
    }

    #[test]
    fn cutoffs_follow_the_tenant_window() {
        let a = TenantId::new("acme").unwrap();
        let b = TenantId::new("beta").unwrap();
        let p = RetentionPolicy::new(Duration::from_secs(10))
            .tenant(a.clone(), Duration::from_secs(100));
        let c = p.cutoffs(t(1_000_000));
        assert_eq!(c.before(&a), t(900_000));
        assert_eq!(c.before(&b), t(990_000));
        assert_eq!(c.latest(), t(990_000));
        assert_eq!(p.window_for(&a), Duration::from_secs(100));
    }

    #[test]
    fn windows_are_bounded() {
        let p = RetentionPolicy::new(MAX_RETENTION + Duration::from_secs(1));
        assert_eq!(p.validate().unwrap_err().field(), Some("older_than"));
        let p = RetentionPolicy::new(Duration::from_secs(1))
            .tenant(TenantId::default(), MAX_RETENTION * 2);
        assert_eq!(p.validate().unwrap_err().field(), Some("tenant_window"));
    }
}
