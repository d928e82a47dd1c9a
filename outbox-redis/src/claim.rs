//! The claim path of [`RedisStore`] (the hot path): claim, complete, release, extend and
//! mark-sending, each one run of its script (`scripts/claim.lua`, `complete.lua`,
//! `release.lua`, `lease.lua`). [`outboxkit_core::DeliveryStore`] forwards here from
//! `store.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, ClaimSource, ClaimToken, Claimed, Completion, DeliveryStatus, Entropy, Error,
    Lease, ReleaseReport, Result,
};
use redis::Value;

use crate::error::corrupt;
use crate::rows::{
    delivery, int, items, message, pack_attempt, pack_h, pack_v, str_of, text, token_arg, Args,
};
use crate::store::RedisStore;

/// Random bytes drawn from the injected entropy in one read, handed out in order (so a
/// claim of 1000 tokens reads the random source once).
#[derive(Debug)]
struct Drawn(Vec<u8>, AtomicUsize);

impl Entropy for Drawn {
    fn fill(&self, buf: &mut [u8]) {
        for b in buf {
            let i = self.1.fetch_add(1, Ordering::Relaxed);
            *b = self.0[i % self.0.len()];
        }
    }
}

impl RedisStore {
    fn tokens(&self, n: usize) -> Vec<ClaimToken> {
        let mut bytes = vec![0u8; n.max(1) * 16];
        self.inner.entropy.fill(&mut bytes);
        let drawn = Drawn(bytes, AtomicUsize::new(0));
        (0..n).map(|_| ClaimToken::generate(&drawn)).collect()
    }

    async fn lease_op(&self, op: &str, lease: &Lease, until: Option<i64>) -> Result<()> {
        let mut a = Args::new();
        a.s(op)
            .s(lease.delivery_id.to_string())
            .s(lease.tenant.as_str())
            .s(token_arg(&lease.token))
            .t(self.now());
        if let Some(u) = until {
            a.n(u);
        }
        let ok: i64 = self.run(&self.inner.scripts.lease, &a).await?;
        if ok == 1 {
            Ok(())
        } else {
            Err(Error::lease_lost())
        }
    }

    fn complete_args(&self, items: &[(Lease, Completion)]) -> Result<Args> {
        let now = self.now();
        let mut a = Args::new();
        a.t(now).n(self.inner.config.attempts_cap);
        for (lease, c) in items {
            let u = lease.settle(&c.verdict, c.attempt.as_ref(), now);
            let last = match &u.last_outcome {
                Some(l) => serde_json::to_vec(l).map_err(|_| corrupt("attempt"))?,
                None => Vec::new(),
            };
            let entry = match &c.attempt {
                Some(r) => pack_attempt(r, lease.is_probe())?,
                None => Vec::new(),
            };
            a.s(lease.delivery_id.to_string())
                .s(lease.tenant.as_str())
                .s(token_arg(&lease.token))
                .s(u.status.as_str())
                .n(u.attempts)
                .t(u.next_attempt_at);
            match u.completed_at {
                Some(t) => a.t(t),
                None => a.s(""),
            };
            a.s(pack_h(u.status, u.attempts, u.next_attempt_at, None, now))
                .s(pack_v(u.snoozes, u.completed_at, u.dead_reason))
                .b(last)
                .b(entry)
                .s(if u.disable_endpoint {
                    "1"
                } else if u.awaits_endpoint {
                    "w"
                } else {
                    "0"
                });
        }
        Ok(a)
    }

    pub(crate) async fn claim_rows(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let now = self.now();
        let until = now.saturating_add(request.lease());
        let batch = request.batch_size() as usize;
        let mut a = Args::new();
        a.t(now).t(until).n(request.batch_size());
        let srcs = sources(request);
        a.n(srcs.len() as i64);
        for (kind, target, budget) in srcs {
            a.s(kind).s(target).n(budget);
        }
        a.n(request.excluded_topics().len() as i64);
        for t in request.excluded_topics() {
            a.s(t.as_str());
        }
        a.n(request.dormant().len() as i64);
        for t in request.dormant() {
            a.s(t.as_str());
        }
        for t in self.tokens(batch) {
            a.s(token_arg(&t));
        }
        let reply: Value = self.run(&self.inner.scripts.claim, &a).await?;
        items(reply)?.into_iter().map(claimed).collect()
    }

    pub(crate) async fn complete_rows(
        &self,
        items_in: &[(Lease, Completion)],
    ) -> Result<Vec<Result<()>>> {
        if items_in.is_empty() {
            return Ok(Vec::new());
        }
        let a = self.complete_args(items_in)?;
        let reply: Value = self.run(&self.inner.scripts.complete, &a).await?;
        let out: Vec<Result<()>> = items(reply)?
            .iter()
            .map(|v| match int(v) {
                Some(1) => Ok(()),
                _ => Err(Error::lease_lost()),
            })
            .collect();
        if out.len() != items_in.len() {
            return Err(corrupt("reply"));
        }
        Ok(out)
    }

    pub(crate) async fn release_rows(
        &self,
        leases: &[Lease],
        delay: Duration,
    ) -> Result<ReleaseReport> {
        if leases.is_empty() {
            return Ok(ReleaseReport::default());
        }
        let now = self.now();
        let mut a = Args::new();
        a.t(now);
        for lease in leases {
            let u = lease.release(delay, now);
            a.s(lease.delivery_id.to_string())
                .s(lease.tenant.as_str())
                .s(token_arg(&lease.token))
                .s(u.status.as_str())
                .n(u.attempts)
                .t(u.next_attempt_at)
                .s(pack_h(u.status, u.attempts, u.next_attempt_at, None, now));
        }
        let reply: Value = self.run(&self.inner.scripts.release, &a).await?;
        let v = items(reply)?;
        let n = |i: usize| {
            v.get(i)
                .and_then(int)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| corrupt("reply"))
        };
        let report = ReleaseReport {
            released: n(0)?,
            lost: n(1)?,
        };
        if report.released > 0 {
            self.wake_local();
        }
        Ok(report)
    }

    pub(crate) async fn extend_lease(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let until = self.now().saturating_add(by);
        self.lease_op("extend", lease, Some(until.as_unix_millis()))
            .await?;
        Ok(Lease {
            until,
            ..lease.clone()
        })
    }

    pub(crate) async fn mark_lease_sending(&self, lease: &Lease) -> Result<()> {
        self.lease_op("sending", lease, None).await
    }
}

/// The served sources as (kind, target, budget), first occurrence of each destination
/// winning as in [`ClaimRequest::budget_for`].
fn sources(request: &ClaimRequest) -> Vec<(&'static str, String, u32)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in request.sources() {
        let (kind, target, budget) = match s {
            ClaimSource::Handler {
                consumer,
                max_attempts,
            } => ("handler", consumer.to_string(), *max_attempts),
            ClaimSource::Webhooks { max_attempts } => ("webhook", String::new(), *max_attempts),
            ClaimSource::Email { max_attempts } => ("email", String::new(), *max_attempts),
        };
        if seen.insert((kind, target.clone())) {
            out.push((kind, target, budget));
        }
    }
    out
}

fn claimed(v: Value) -> Result<Claimed> {
    let parts = items(v)?;
    let [from, row @ .., payload, packed] = parts.as_slice() else {
        return Err(corrupt("reply"));
    };
    let claimed_from = text(from)
        .and_then(|s| DeliveryStatus::parse(&s).ok())
        .ok_or_else(|| corrupt("reply"))?;
    let token = row
        .first()
        .and_then(str_of)
        .and_then(|h| h.split('|').nth(3).and_then(|t| ClaimToken::parse(t).ok()))
        .ok_or_else(|| corrupt("reply"))?;
    let delivery = delivery(row)?;
    let message = message(payload, packed)?;
    let lease = Lease {
        delivery_id: delivery.id,
        tenant: delivery.tenant.clone(),
        token,
        until: delivery.lease_until.ok_or_else(|| corrupt("delivery"))?,
        attempts: delivery.attempts,
        snoozes: delivery.snoozes,
        claimed_from,
    };
    Ok(Claimed {
        lease,
        delivery,
        message,
    })
}
