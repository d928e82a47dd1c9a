//! The ledger side of [`State`] (tenant-scoped listings, attempts, retention) and `Ledger`
//! for [`InMemoryStore`].

use foldhash::HashSet;
use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use outboxkit_core::store::check_purge_limit;
use outboxkit_core::{
    Attempt, Cursor, Delivery, DeliveryFilter, DeliveryId, Ledger, Message, MessageId, Page,
    PageRequest, PayloadFingerprint, PurgeReport, Result, RetentionCutoffs, TenantId, TenantStats,
    Timestamp,
};

use super::state::{not_found, Row, State};
use super::InMemoryStore;

impl State {
    // ----- ledger --------------------------------------------------------------------

    pub(super) fn list(
        &self,
        tenant: &TenantId,
        f: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        page.validate()?;
        f.validate()?;
        let mut v: Vec<&Delivery> = self
            .rows
            .values()
            .map(|r| &r.d)
            .filter(|d| {
                &d.tenant == tenant
                    && f.matches_with_attempts(
                        d,
                        self.attempts.get(&d.id).map_or(&[][..], Vec::as_slice),
                    )
            })
            .filter(|d| page.cursor.as_ref().is_none_or(|c| c.precedes(d)))
            .collect();
        v.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
        let limit = page.limit as usize;
        let more = v.len() > limit;
        let items: Vec<Delivery> = v.into_iter().take(limit).cloned().collect();
        let next = if more {
            items.last().map(Cursor::after)
        } else {
            None
        };
        Ok(Page { items, next })
    }

    pub(super) fn delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.row_of(tenant, id).map(|r| r.d.clone())
    }

    pub(super) fn message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.messages
            .get(&id)
            .filter(|m| &m.tenant == tenant)
            .cloned()
            .ok_or_else(|| not_found("message"))
    }

    /// The delivery's ledger, each attempt with its payload's fingerprint (the message's:
    /// computed here, once per read).
    pub(super) fn attempts(&self, tenant: &TenantId, id: DeliveryId) -> Result<Vec<Attempt>> {
        let row = self.row_of(tenant, id)?;
        let mut list = self.attempts.get(&id).cloned().unwrap_or_default();
        if !list.is_empty() {
            let payload = self.messages.get(&row.d.message_id).map_or_else(
                || PayloadFingerprint::of(&[]),
                |m| PayloadFingerprint::of(&m.payload),
            );
            for a in &mut list {
                a.payload = payload.clone();
            }
        }
        Ok(list)
    }

    /// One tenant per call, in rotation, each tenant with its own cutoff (ARCHITECTURE
    /// "Retention").
    pub(super) fn purge(&mut self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        let finished = |r: &Row| {
            r.d.status.is_finished()
                && r.d
                    .completed_at
                    .is_some_and(|c| c < cutoffs.before(&r.d.tenant))
        };
        let referenced: HashSet<MessageId> = self.rows.values().map(|r| r.d.message_id).collect();
        let orphan =
            |m: &Message| m.created_at < cutoffs.before(&m.tenant) && !referenced.contains(&m.id);
        let tenants: BTreeSet<&TenantId> = self
            .rows
            .values()
            .filter(|r| finished(r))
            .map(|r| &r.d.tenant)
            .chain(
                self.messages
                    .values()
                    .filter(|m| orphan(m))
                    .map(|m| &m.tenant),
            )
            .collect();
        let pick = tenants
            .iter()
            .find(|t| self.purge_cursor.as_ref().is_none_or(|c| **t > c))
            .or_else(|| tenants.first())
            .map(|t| (*t).clone());
        let Some(tenant) = pick else {
            return Ok(PurgeReport::default());
        };
        let report = self.purge_one(&tenant, cutoffs.before(&tenant), limit);
        self.purge_cursor = Some(tenant);
        Ok(report)
    }

    /// One tenant's retention, outside the rotation.
    pub(super) fn purge_tenant(
        &mut self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        check_purge_limit(limit)?;
        Ok(self.purge_one(tenant, before, limit))
    }

    fn purge_one(&mut self, tenant: &TenantId, before: Timestamp, limit: u32) -> PurgeReport {
        let mut gone: Vec<(Timestamp, u64, DeliveryId)> = self
            .rows
            .values()
            .filter(|r| {
                &r.d.tenant == tenant
                    && r.d.status.is_finished()
                    && r.d.completed_at.is_some_and(|c| c < before)
            })
            .map(|r| (r.d.completed_at.unwrap_or(before), r.seq, r.d.id))
            .collect();
        gone.sort();
        gone.truncate(limit as usize);
        for (_, _, id) in &gone {
            self.remove_row(*id);
        }
        let referenced: HashSet<MessageId> = self.rows.values().map(|r| r.d.message_id).collect();
        let mut orphans: Vec<(Timestamp, MessageId)> = self
            .messages
            .values()
            .filter(|m| &m.tenant == tenant && m.created_at < before && !referenced.contains(&m.id))
            .map(|m| (m.created_at, m.id))
            .collect();
        orphans.sort();
        orphans.truncate(limit as usize);
        for (_, id) in &orphans {
            if let Some(m) = self.messages.remove(id) {
                if let Some(k) = m.idempotency_key {
                    self.idempotency.remove(&(m.tenant, m.topic, k));
                }
            }
        }
        PurgeReport {
            deliveries: gone.len() as u64,
            messages: orphans.len() as u64,
            tenant: Some(tenant.clone()),
        }
    }

    /// Every tenant with deliveries or messages, by name, with its counts.
    pub(super) fn tenants(&self, now: Timestamp) -> Vec<TenantStats> {
        let mut names: BTreeMap<TenantId, u64> = BTreeMap::new();
        for m in self.messages.values() {
            *names.entry(m.tenant.clone()).or_default() += 1;
        }
        for r in self.rows.values() {
            names.entry(r.d.tenant.clone()).or_default();
        }
        names
            .into_iter()
            .map(|(tenant, messages)| TenantStats {
                stats: self.stats_where(now, |d| d.tenant == tenant),
                tenant,
                messages,
            })
            .collect()
    }
}

#[async_trait]
impl Ledger for InMemoryStore {
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>> {
        self.lock().list(tenant, filter, page)
    }

    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery> {
        self.lock().delivery(tenant, id)
    }

    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message> {
        self.lock().message(tenant, id)
    }

    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>> {
        self.lock().attempts(tenant, delivery)
    }

    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport> {
        self.lock().purge(cutoffs, limit)
    }

    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport> {
        self.lock().purge_tenant(tenant, before, limit)
    }

    async fn tenants(&self) -> Result<Vec<TenantStats>> {
        let now = self.now();
        Ok(self.lock().tenants(now))
    }
}
