//! `DeliveryStore`: claim in one statement, complete and release in batches, fenced by
//! claim tokens.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    ClaimRequest, ClaimToken, Claimed, Completion, DeliveryId, DeliveryStatus, DeliveryStore,
    EndpointId, Error, ErrorKind, Lease, ReleaseReport, Result, Stats, TenantId, WakeListener,
};
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::error::DbResult;
use crate::rows::{self, get, int4, ms};
use crate::store::PostgresStore;

/// The columns of one completion, as parallel arrays for `unnest`.
#[derive(Default)]
struct CompletionArrays {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    status: Vec<&'static str>,
    attempts: Vec<i32>,
    snoozes: Vec<i32>,
    next_at: Vec<i64>,
    completed_at: Vec<Option<i64>>,
    dead_reason: Vec<Option<&'static str>>,
    lo_outcome: Vec<Option<&'static str>>,
    lo_code: Vec<Option<i32>>,
    lo_excerpt: Vec<Option<String>>,
    lo_at: Vec<Option<i64>>,
    disable: Vec<bool>,
    a_set: Vec<bool>,
    a_probe: Vec<bool>,
    a_started: Vec<i64>,
    a_finished: Vec<i64>,
    a_outcome: Vec<&'static str>,
    a_code: Vec<Option<i32>>,
    a_excerpt: Vec<Option<String>>,
    tenants: Vec<String>,
    awaits: Vec<bool>,
}

impl PostgresStore {
    /// Run `statement` (an update counted with a NOTIFY) and wake local listeners when it
    /// changed something.
    async fn counted(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> Result<u64> {
        let row = query.fetch_one(&self.inner.pool).await.db()?;
        let n: i64 = get(&row, "n")?;
        if n > 0 {
            self.inner.wakeups.wake();
        }
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// An operator call on one delivery (`replay`, `retry_now`, `reset`): `statement` takes
    /// the delivery, the tenant, now and the NOTIFY channel and changes at most one row;
    /// when it changes none, `NotFound` or `Conflict` with `why`.
    async fn operator_change(
        &self,
        statement: &str,
        tenant: &TenantId,
        delivery: DeliveryId,
        why: &'static str,
    ) -> Result<()> {
        let n = self
            .counted(
                sqlx::query(statement)
                    .bind(delivery.as_uuid())
                    .bind(tenant.as_str())
                    .bind(ms(self.inner.clock.now()))
                    .bind(&self.inner.channel),
            )
            .await?;
        if n == 0 {
            return Err(self.missing_or_conflict(tenant, delivery, why).await);
        }
        Ok(())
    }

    /// `NotFound` for a delivery that is not the tenant's, else `Conflict` (wrong status).
    async fn missing_or_conflict(
        &self,
        tenant: &TenantId,
        id: DeliveryId,
        why: &'static str,
    ) -> Error {
        let found = sqlx::query(&self.inner.sql.status_of)
            .bind(id.as_uuid())
            .bind(tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await;
        match found {
            Ok(Some(_)) => Error::new(ErrorKind::Conflict, why),
            Ok(None) => Error::not_found("delivery"),
            Err(e) => crate::error::map_err(e),
        }
    }
}

fn claimed(row: &PgRow) -> Result<Claimed> {
    let delivery = rows::delivery(row)?;
    let message = rows::claimed_message(row, &delivery)?;
    let token: Uuid = get(row, "claim_token")?;
    let claimed_from: String = get(row, "claimed_from")?;
    let lease = Lease {
        delivery_id: delivery.id,
        tenant: delivery.tenant.clone(),
        token: ClaimToken::from_uuid(token),
        until: delivery
            .lease_until
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "a claimed row has no lease"))?,
        attempts: delivery.attempts,
        snoozes: delivery.snoozes,
        claimed_from: rows::status(&claimed_from)?,
    };
    Ok(Claimed {
        lease,
        delivery,
        message,
    })
}

#[async_trait]
impl DeliveryStore for PostgresStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let now = self.inner.clock.now();
        let until = now.saturating_add(request.lease());
        let batch = request.batch_size() as usize;
        let (consumers, budgets): (Vec<&str>, Vec<i32>) = request
            .consumers()
            .map(|(c, b)| (c.as_str(), int4(b)))
            .unzip();
        let min_budget = request
            .consumers()
            .map(|(_, b)| b)
            .chain(request.webhook_budget())
            .chain(request.email_budget())
            .min()
            .unwrap_or(1);
        let excluded: Vec<&str> = request
            .excluded_topics()
            .iter()
            .map(|t| t.as_str())
            .collect();
        let dormant: Vec<&str> = request.dormant().iter().map(|t| t.as_str()).collect();
        // Fresh tokens from the injected entropy, one fill for the whole batch.
        let mut bytes = vec![0u8; 16 * batch];
        self.inner.entropy.fill(&mut bytes);
        let tokens: Vec<Uuid> = bytes
            .chunks_exact(16)
            .map(|c| {
                let mut b = [0u8; 16];
                b.copy_from_slice(c);
                uuid::Builder::from_random_bytes(b).into_uuid()
            })
            .collect();
        let found = sqlx::query(&self.inner.sql.claim)
            .bind(ms(now))
            .bind(batch as i64)
            .bind(consumers)
            .bind(budgets)
            .bind(request.webhook_budget().map(int4))
            .bind(request.email_budget().map(int4))
            .bind(excluded)
            .bind(dormant)
            .bind(tokens)
            .bind(ms(until))
            .bind(int4(min_budget))
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        found.iter().map(claimed).collect()
    }

    async fn complete(&self, lease: &Lease, completion: &Completion) -> Result<()> {
        let items = [(lease.clone(), completion.clone())];
        let mut out = self.complete_many(&items).await?;
        out.pop()
            .unwrap_or_else(|| Err(Error::new(ErrorKind::Unexpected, "no completion result")))
    }

    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.inner.clock.now();
        let mut a = CompletionArrays::default();
        // A delivery named twice in one call: only its first item can match.
        let mut seen = HashSet::with_capacity(items.len());
        let mut sent = Vec::with_capacity(items.len());
        for (lease, completion) in items {
            if !seen.insert(lease.delivery_id) {
                sent.push(false);
                continue;
            }
            sent.push(true);
            let u = lease.settle(&completion.verdict, completion.attempt.as_ref(), now);
            a.ids.push(lease.delivery_id.as_uuid());
            a.tokens.push(lease.token.as_uuid());
            a.status.push(u.status.as_str());
            a.attempts.push(int4(u.attempts));
            a.snoozes.push(int4(u.snoozes));
            a.next_at.push(ms(u.next_attempt_at));
            a.completed_at.push(u.completed_at.map(ms));
            a.dead_reason.push(u.dead_reason.map(|r| r.as_str()));
            a.lo_outcome
                .push(u.last_outcome.as_ref().map(|o| o.outcome.as_str()));
            a.lo_code.push(
                u.last_outcome
                    .as_ref()
                    .and_then(|o| o.status_code)
                    .map(i32::from),
            );
            a.lo_excerpt
                .push(u.last_outcome.as_ref().and_then(|o| o.excerpt.clone()));
            a.lo_at.push(u.last_outcome.as_ref().map(|o| ms(o.at)));
            a.disable.push(u.disable_endpoint);
            a.awaits.push(u.awaits_endpoint);
            let rec = completion.attempt.as_ref();
            a.a_set.push(rec.is_some());
            a.a_probe.push(lease.is_probe());
            a.a_started.push(rec.map_or(0, |r| ms(r.started_at)));
            a.a_finished.push(rec.map_or(0, |r| ms(r.finished_at)));
            a.a_outcome
                .push(rec.map_or("succeeded", |r| r.outcome.as_str()));
            a.a_code
                .push(rec.and_then(|r| r.status_code).map(i32::from));
            a.a_excerpt.push(rec.and_then(|r| r.excerpt.clone()));
            a.tenants.push(lease.tenant.as_str().to_owned());
        }
        let matched: Vec<Uuid> = sqlx::query_scalar(&self.inner.sql.complete)
            .bind(ms(now))
            .bind(a.ids)
            .bind(a.tokens)
            .bind(a.status)
            .bind(a.attempts)
            .bind(a.snoozes)
            .bind(a.next_at)
            .bind(a.completed_at)
            .bind(a.dead_reason)
            .bind(a.lo_outcome)
            .bind(a.lo_code)
            .bind(a.lo_excerpt)
            .bind(a.lo_at)
            .bind(a.disable)
            .bind(a.a_set)
            .bind(a.a_probe)
            .bind(a.a_started)
            .bind(a.a_finished)
            .bind(a.a_outcome)
            .bind(a.a_code)
            .bind(a.a_excerpt)
            .bind(a.tenants)
            .bind(a.awaits)
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        let matched: HashSet<Uuid> = matched.into_iter().collect();
        Ok(items
            .iter()
            .zip(sent)
            .map(|((lease, _), sent)| {
                if sent && matched.contains(&lease.delivery_id.as_uuid()) {
                    Ok(())
                } else {
                    Err(Error::lease_lost())
                }
            })
            .collect())
    }

    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport> {
        if leases.is_empty() {
            return Ok(ReleaseReport::default());
        }
        let now = self.inner.clock.now();
        let mut seen = HashSet::with_capacity(leases.len());
        let (mut ids, mut tokens, mut status, mut attempts, mut next, mut tenants) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for lease in leases.iter().filter(|l| seen.insert(l.delivery_id)) {
            let u = lease.release(delay, now);
            ids.push(lease.delivery_id.as_uuid());
            tokens.push(lease.token.as_uuid());
            status.push(u.status.as_str());
            attempts.push(int4(u.attempts));
            next.push(ms(u.next_attempt_at));
            tenants.push(lease.tenant.as_str());
        }
        let released: Vec<Uuid> = sqlx::query_scalar(&self.inner.sql.release)
            .bind(ms(now))
            .bind(ids)
            .bind(tokens)
            .bind(status)
            .bind(attempts)
            .bind(next)
            .bind(tenants)
            .fetch_all(&self.inner.pool)
            .await
            .db()?;
        let released = u32::try_from(released.len()).unwrap_or(u32::MAX);
        if released > 0 {
            self.inner.wakeups.wake();
        }
        Ok(ReleaseReport {
            released,
            lost: u32::try_from(leases.len()).unwrap_or(u32::MAX) - released,
        })
    }

    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease> {
        let now = self.inner.clock.now();
        let until = now.saturating_add(by);
        let found: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.extend)
            .bind(lease.delivery_id.as_uuid())
            .bind(lease.token.as_uuid())
            .bind(ms(until))
            .bind(ms(now))
            .bind(lease.tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        match found {
            Some(_) => Ok(Lease {
                until,
                ..lease.clone()
            }),
            None => Err(Error::lease_lost()),
        }
    }

    async fn mark_sending(&self, lease: &Lease) -> Result<()> {
        let found: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.mark_sending)
            .bind(lease.delivery_id.as_uuid())
            .bind(lease.token.as_uuid())
            .bind(ms(self.inner.clock.now()))
            .bind(lease.tenant.as_str())
            .fetch_optional(&self.inner.pool)
            .await
            .db()?;
        found.map(|_| ()).ok_or_else(Error::lease_lost)
    }

    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.counted(
            sqlx::query(&self.inner.sql.release_held)
                .bind(tenant.as_str())
                .bind(endpoint.to_string())
                .bind(ms(self.inner.clock.now()))
                .bind(&self.inner.channel),
        )
        .await
    }

    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(
            &self.inner.sql.replay,
            tenant,
            delivery,
            "only a dead delivery can be replayed",
        )
        .await
    }

    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(
            &self.inner.sql.retry_now,
            tenant,
            delivery,
            "only a pending or held delivery can be retried now",
        )
        .await
    }

    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.operator_change(
            &self.inner.sql.reset,
            tenant,
            delivery,
            "only a held delivery can be reset",
        )
        .await
    }

    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats> {
        crate::tenancy::tenant_stats(self, tenant, endpoint).await
    }

    async fn stats(&self) -> Result<Stats> {
        let now = self.inner.clock.now();
        let row = sqlx::query(&self.inner.sql.stats)
            .bind(ms(now))
            .fetch_one(&self.inner.pool)
            .await
            .db()?;
        let mut stats = Stats::default();
        for (status, column) in [
            (DeliveryStatus::Pending, "pending"),
            (DeliveryStatus::Processing, "processing"),
            (DeliveryStatus::Sending, "sending"),
            (DeliveryStatus::Succeeded, "succeeded"),
            (DeliveryStatus::Held, "held"),
            (DeliveryStatus::Dead, "dead"),
        ] {
            let n: i64 = get(&row, column)?;
            stats.add(status, u64::try_from(n).unwrap_or(0));
        }
        let oldest: Option<i64> = get(&row, "oldest")?;
        if oldest.is_some() {
            let t = rows::ts(&row, "oldest")?;
            stats.oldest_due_at = Some(t);
            stats.oldest_due_age = Some(now.duration_since(t));
        }
        Ok(stats)
    }

    fn wake_listener(&self) -> Option<WakeListener> {
        let listener = self.inner.wakeups.listener();
        self.inner.listener.ensure_started(
            &self.inner.pool,
            &self.inner.channel,
            &self.inner.wakeups,
        );
        Some(listener)
    }
}
