//! The claim path of [`RedisStore`] (the hot path): claim, complete, release, extend and
//! mark-sending, each one run of its script (`scripts/claim.lua`, `complete.lua`,
//! `release.lua`, `lease.lua`). [`outboxkit_core::DeliveryStore`] forwards here from
//! `store.rs`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use outboxkit_core::claim_rules::fair_order;
use outboxkit_core::{
    ClaimRequest, ClaimSource, ClaimToken, Claimed, Completion, DeliveryStatus, Entropy, Error,
    Lease, ReleaseReport, Result,
};
use redis::Value;

use crate::entry::{pack_attempt, pack_record};
use crate::error::corrupt;
use crate::rows::{delivery, int, items, message, pack_h, pack_v, str_of, text, token_arg, Args};
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
    /// `n` fresh claim tokens for rows of `shard`. With several shards a token's first
    /// byte is its shard (the rest stays random), so a lease finds its shard again.
    fn tokens(&self, shard: usize, n: usize) -> Vec<ClaimToken> {
        let mut bytes = vec![0u8; n.max(1) * 16];
        self.inner.entropy.fill(&mut bytes);
        if self.shard_count() > 1 {
            let tag = u8::try_from(shard).unwrap_or(u8::MAX);
            bytes.iter_mut().step_by(16).for_each(|b| *b = tag);
        }
        let drawn = Drawn(bytes, AtomicUsize::new(0));
        (0..n).map(|_| ClaimToken::generate(&drawn)).collect()
    }

    /// The shard a lease's row lives in (from its token), or `None` for a token no claim
    /// of this store handed out.
    pub(crate) fn lease_shard(&self, lease: &Lease) -> Option<usize> {
        let n = self.shard_count();
        if n == 1 {
            return Some(0);
        }
        let s = usize::from(lease.token.as_uuid().as_bytes()[0]);
        (s < n).then_some(s)
    }

    async fn lease_op(&self, op: &str, lease: &Lease, until: Option<i64>) -> Result<()> {
        let Some(shard) = self.lease_shard(lease) else {
            return Err(Error::lease_lost());
        };
        let mut a = Args::new();
        a.s(op)
            .s(lease.delivery_id.to_string())
            .s(lease.tenant.as_str())
            .s(token_arg(&lease.token))
            .t(self.now());
        if let Some(u) = until {
            a.n(u);
        }
        let ok: i64 = self.run_on(shard, &self.inner.scripts.lease, &a).await?;
        if ok == 1 {
            Ok(())
        } else {
            Err(Error::lease_lost())
        }
    }

    fn complete_args<'a>(
        &self,
        items: impl Iterator<Item = &'a (Lease, Completion)>,
    ) -> Result<Args> {
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
        let batch = request.batch_size() as usize;
        let n = self.shard_count();
        if n == 1 {
            return self.claim_on(0, request, batch, &[]).await;
        }
        // Several shards: read each shard's groups with due work and their first due rows
        // (read-only), play the rounds of a fair claim over all of them as one store would
        // (a group's rows in several shards merged in (due, sequence) order), and claim from
        // each shard exactly the rows of each group the rounds gave it; shards that filled
        // their count then fill what is left of the batch.
        let now = self.now();
        // group name (after the shard's prefix) → its claimable rows as (score, member,
        // shard), from each shard's dry run of the claim (which knows the barrier).
        let mut rows: std::collections::HashMap<String, Vec<DueRow>> = Default::default();
        for shard in 0..n {
            let a = self.claim_args(request, now, batch, -1, &[]);
            let reply: Value = self.run_on(shard, &self.inner.scripts.claim, &a).await?;
            for row in items(reply)? {
                let row = items(row)?;
                let (Some(m), Some(g), Some(score)) = (
                    row.first().and_then(text),
                    row.get(1).and_then(text),
                    row.get(2)
                        .and_then(text)
                        .and_then(|s| s.parse::<i64>().ok()),
                ) else {
                    return Err(corrupt("reply"));
                };
                rows.entry(g).or_default().push((score, m, shard));
            }
        }
        // Each group's rows over all the shards in (due, member) order, cut to its
        // endpoint's room and the batch, keyed by its first row: core's fair rounds pick.
        let heads: Vec<GroupHead> = rows
            .into_iter()
            .filter(|(_, r)| !r.is_empty())
            .map(|(g, mut r)| {
                r.sort();
                r.truncate(group_room(request, &g).unwrap_or(batch).min(batch));
                let key = (r[0].0, r[0].1.clone());
                (key, r.into_iter().map(|row| (g.clone(), row)).collect())
            })
            .collect();
        // quotas[shard] = (group, how many) in round order; picks = the rows, in order.
        let mut quotas: Vec<Vec<(String, usize)>> = vec![Vec::new(); n];
        let mut picks: Vec<String> = Vec::new();
        for (g, (_, m, shard)) in fair_order(heads, batch) {
            let q = &mut quotas[shard];
            match q.iter_mut().find(|(name, _)| *name == g) {
                Some(e) => e.1 += 1,
                None => q.push((g, 1)),
            }
            picks.push(m.get(15..).unwrap_or_default().to_owned());
        }
        let want: Vec<usize> = quotas.iter().map(|q| q.iter().map(|e| e.1).sum()).collect();
        let start = self.inner.turn.fetch_add(1, Ordering::Relaxed);
        let order: Vec<usize> = (0..n).map(|k| (start + k) % n).collect();
        let mut out = Vec::new();
        let mut full = Vec::new();
        let mut failed = None;
        for &shard in &order {
            let want = want[shard];
            if want == 0 {
                // The rounds gave it nothing, but its rows may fill what others cannot.
                full.push(shard);
                continue;
            }
            match self.claim_on(shard, request, want, &quotas[shard]).await {
                Ok(rows) => {
                    if rows.len() == want {
                        full.push(shard);
                    }
                    out.extend(rows);
                }
                Err(e) => failed = Some(e),
            }
        }
        for shard in full {
            let want = batch - out.len();
            if want == 0 {
                break;
            }
            // What the rounds took counts against each endpoint's room.
            let fill = less_taken(request, &out);
            match self.claim_on(shard, &fill, want, &[]).await {
                Ok(rows) => out.extend(rows),
                Err(e) => failed = Some(e),
            }
        }
        // Hand the rows out in the order of the rounds (rows beyond them last).
        let rank: std::collections::HashMap<&str, usize> = picks
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        out.sort_by_cached_key(|c| {
            rank.get(c.delivery.id.to_string().as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        match failed {
            // Rows already claimed are leased: hand them out rather than strand them.
            Some(e) if out.is_empty() => Err(e),
            Some(e) => {
                tracing::warn!(error = %e, "outbox claim: a redis shard failed; returning the other shards' rows");
                Ok(out)
            }
            None => Ok(out),
        }
    }

    /// The claim script's arguments before the tokens (`nquota` -1 = a dry run).
    fn claim_args(
        &self,
        request: &ClaimRequest,
        now: outboxkit_core::Timestamp,
        batch: usize,
        nquota: i64,
        quotas: &[(String, usize)],
    ) -> Args {
        let until = now.saturating_add(request.lease());
        let mut a = Args::new();
        a.t(now)
            .t(until)
            .n(i64::try_from(batch).unwrap_or(i64::MAX));
        let srcs = sources(request);
        a.n(srcs.len() as i64);
        for (kind, target, budget) in srcs {
            a.s(kind).s(target).n(budget);
        }
        a.n(request.excluded_endpoints().len() as i64);
        for e in request.excluded_endpoints() {
            a.s(e.to_string());
        }
        a.n(request.dormant().len() as i64);
        for t in request.dormant() {
            a.s(t.as_str());
        }
        a.n(request.default_endpoint_limit().map_or(0, i64::from));
        a.n(request.endpoint_rooms().len() as i64);
        for (e, n) in request.endpoint_rooms() {
            a.s(e.to_string()).n(i64::from(*n));
        }
        a.n(nquota);
        for (g, q) in quotas {
            a.s(g).n(i64::try_from(*q).unwrap_or(i64::MAX));
        }
        a
    }

    /// Claim up to `batch` rows of one shard.
    async fn claim_on(
        &self,
        shard: usize,
        request: &ClaimRequest,
        batch: usize,
        quotas: &[(String, usize)],
    ) -> Result<Vec<Claimed>> {
        let a = self.claim_args(request, self.now(), batch, quotas.len() as i64, quotas);
        let mut a = a;
        for t in self.tokens(shard, batch) {
            a.s(token_arg(&t));
        }
        let reply: Value = self.run_on(shard, &self.inner.scripts.claim, &a).await?;
        items(reply)?.into_iter().map(claimed).collect()
    }

    pub(crate) async fn complete_rows(
        &self,
        items_in: &[(Lease, Completion)],
    ) -> Result<Vec<Result<()>>> {
        let mut out: Vec<Result<()>> = items_in.iter().map(|_| Err(Error::lease_lost())).collect();
        for (shard, mine) in self.by_shard(items_in.iter().map(|(l, _)| l)) {
            let a = self.complete_args(mine.iter().map(|&i| &items_in[i]))?;
            let reply: Value = self.run_on(shard, &self.inner.scripts.complete, &a).await?;
            let got = items(reply)?;
            if got.len() != mine.len() {
                return Err(corrupt("reply"));
            }
            let mut mirror = Args::new();
            mirror.s("mirror").t(self.now());
            let mut mirrored = false;
            for (i, v) in mine.into_iter().zip(&got) {
                if int(v) == Some(0) {
                    continue;
                }
                out[i] = Ok(());
                if let (Some(endpoint), true) = (text(v), self.shard_count() > 1) {
                    let (lease, c) = &items_in[i];
                    let record = match &c.attempt {
                        Some(r) => pack_record(r)?,
                        None => Vec::new(),
                    };
                    let gone = lease.settle(&c.verdict, c.attempt.as_ref(), self.now());
                    if record.is_empty() && !gone.disable_endpoint {
                        continue;
                    }
                    mirror
                        .s(endpoint)
                        .s(lease.tenant.as_str())
                        .b(record)
                        .s(if gone.disable_endpoint { "1" } else { "0" });
                    mirrored = true;
                }
            }
            if mirrored {
                for other in (0..self.shard_count()).filter(|&s| s != shard) {
                    let _: i64 = self
                        .run_on(other, &self.inner.scripts.endpoint, &mirror)
                        .await?;
                }
            }
        }
        Ok(out)
    }

    /// The indexes of `leases` grouped by shard (leases of no shard are left out).
    fn by_shard<'a>(&self, leases: impl Iterator<Item = &'a Lease>) -> Vec<(usize, Vec<usize>)> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, lease) in leases.enumerate() {
            let Some(shard) = self.lease_shard(lease) else {
                continue;
            };
            match groups.iter_mut().find(|g| g.0 == shard) {
                Some(g) => g.1.push(i),
                None => groups.push((shard, vec![i])),
            }
        }
        groups
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
        let mut report = ReleaseReport::default();
        let groups = self.by_shard(leases.iter());
        let known: usize = groups.iter().map(|g| g.1.len()).sum();
        report.lost = u32::try_from(leases.len() - known).unwrap_or(u32::MAX);
        for (shard, mine) in groups {
            let mut a = Args::new();
            a.t(now);
            for lease in mine.iter().map(|&i| &leases[i]) {
                let u = lease.release(delay, now);
                a.s(lease.delivery_id.to_string())
                    .s(lease.tenant.as_str())
                    .s(token_arg(&lease.token))
                    .s(u.status.as_str())
                    .n(u.attempts)
                    .t(u.next_attempt_at)
                    .s(pack_h(u.status, u.attempts, u.next_attempt_at, None, now));
            }
            let reply: Value = self.run_on(shard, &self.inner.scripts.release, &a).await?;
            let v = items(reply)?;
            let n = |i: usize| {
                v.get(i)
                    .and_then(int)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| corrupt("reply"))
            };
            report.released += n(0)?;
            report.lost += n(1)?;
        }
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

/// A due row seen by a multi-shard claim: (score, member, shard).
type DueRow = (i64, String, usize);

/// A group's first-row key and its rows over the shards, each named with its group.
type GroupHead = ((i64, String), Vec<(String, DueRow)>);

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
    let mut parts = items(v)?;
    let (Some(packed), Some(payload)) = (parts.pop(), parts.pop()) else {
        return Err(corrupt("reply"));
    };
    let [from, row @ ..] = parts.as_slice() else {
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
    let message = message(payload, &packed)?;
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

/// The room of a group named by its key after the prefix (`:g:<len>:<kind><len>:<tenant>
/// <target>`), when it is an endpoint's group with a room or a limit.
fn group_room(request: &ClaimRequest, group: &str) -> Option<usize> {
    let mut rest = group.strip_prefix(":g:")?;
    let mut parts = [""; 2];
    for part in &mut parts {
        let (len, tail) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        *part = tail.get(..len)?;
        rest = tail.get(len..)?;
    }
    if parts[0] != "webhook" {
        return None;
    }
    let endpoint = outboxkit_core::EndpointId::parse(rest).ok()?;
    request.room_for(&endpoint).map(|n| n as usize)
}

/// `request` with each endpoint's room less the deliveries to it in `taken`.
fn less_taken(request: &ClaimRequest, taken: &[Claimed]) -> ClaimRequest {
    let mut counts: std::collections::BTreeMap<outboxkit_core::EndpointId, u32> =
        Default::default();
    for c in taken {
        if let Some(e) = c.delivery.destination.endpoint() {
            *counts.entry(e).or_default() += 1;
        }
    }
    let mut fill = request.clone();
    for (e, n) in counts {
        if let Some(room) = request.room_for(&e) {
            fill = fill.endpoint_room(e, room.saturating_sub(n));
        }
    }
    fill
}
