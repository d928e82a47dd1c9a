//! [`Ledger`]: what an operator reads, and retention; its conveniences in [`LedgerExt`].

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{DeliveryId, MessageId, TenantId};
use crate::model::{Attempt, Delivery, Message};
use crate::retention::RetentionCutoffs;
use crate::time::Timestamp;

use super::{DeliveryFilter, Page, PageRequest, PurgeReport, TenantStats};

/// What an operator reads, and retention.
///
/// # Contract
/// - Listings are newest first by `(created_at, id)`, filtered, paged with a stable cursor
///   (`ledger_lists_newest_first_with_stable_cursor`, `ledger_filters`), and scoped by
///   tenant (`tenant_isolation_of_ledger`).
/// - `attempts` are in order with outcome, status, bounded excerpt (`ledger_records_attempts`),
///   each record as completed (`attempts_round_trip`).
/// - `purge_expired` with one cutoff for every tenant ([`LedgerExt::purge_completed`])
///   removes only `succeeded`/`dead` deliveries completed before the cutoff, at most `limit`
///   per call, one tenant per call in rotation (`purge_removes_only_finished_before_cutoff`,
///   `purge_rotates_over_tenants`).
/// - `purge_expired` applies each tenant's own cutoff and still rotates over every tenant
///   (`purge_honours_tenant_windows`, `purge_rotation_visits_every_tenant_with_windows`).
/// - `purge_tenant` touches only the named tenant and leaves the rotation alone
///   (`purge_tenant_touches_only_its_tenant`).
/// - Attempts carry their run, scheduled time and payload fingerprint; a replay starts a
///   new run and keeps the earlier attempts (`replay_starts_a_new_run`,
///   `ledger_records_schedule_and_payload`).
/// - An attempt's [`crate::AttemptDetail`] MUST come back from `attempts` byte for byte as
///   completed, on every path (`complete`, `complete_many`, the final attempt, a probe)
///   (`attempt_detail_round_trips_byte_for_byte`, `retried_delivery_keeps_a_detail_per_attempt`,
///   `held_probe_keeps_its_detail`); an attempt completed without one MUST read `None`
///   (`attempt_without_detail_reads_none`); a replay MUST keep the earlier attempts' details
///   (`replay_keeps_earlier_attempt_details`); a purge MUST remove them with their delivery
///   (`purge_removes_attempt_details`).
/// - `list_deliveries` filters by ordering key and by text over the stored excerpts
///   (`ledger_filters_by_ordering_key_and_text`).
/// - `tenants` lists every tenant with deliveries or messages and its counts
///   (`tenants_are_listed_with_counts`).
///
/// # Cancel safety
/// Reads have no side effect. A purge removes each delivery with its attempts, or leaves
/// both; a dropped purge may have removed part of its batch, and the next pass goes on from
/// what is left.
#[async_trait]
pub trait Ledger: Send + Sync + fmt::Debug + 'static {
    /// A page of a tenant's deliveries.
    async fn list_deliveries(
        &self,
        tenant: &TenantId,
        filter: &DeliveryFilter,
        page: PageRequest,
    ) -> Result<Page<Delivery>>;
    /// One delivery.
    async fn get_delivery(&self, tenant: &TenantId, id: DeliveryId) -> Result<Delivery>;
    /// One message.
    async fn get_message(&self, tenant: &TenantId, id: MessageId) -> Result<Message>;
    /// A delivery's attempts, oldest first.
    async fn attempts(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<Vec<Attempt>>;
    /// One rotating retention pass with a cutoff per tenant
    /// ([`crate::RetentionPolicy::cutoffs`]): serves the next tenant (after the stored
    /// rotation cursor, wrapping) that has something expired under its own cutoff.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped pass removed whole deliveries (with their attempts) or none;
    /// the next pass purges what is left.
    async fn purge_expired(&self, cutoffs: &RetentionCutoffs, limit: u32) -> Result<PurgeReport>;
    /// Remove `tenant`'s finished deliveries completed before `before` (at most `limit`)
    /// with their attempts, then its messages created before `before` left without
    /// deliveries. Touches no other tenant and does not move the rotation cursor.
    ///
    /// # Cancel safety
    /// Cancel safe, as `purge_expired`: call again to purge what is left.
    async fn purge_tenant(
        &self,
        tenant: &TenantId,
        before: Timestamp,
        limit: u32,
    ) -> Result<PurgeReport>;
    /// Every tenant that has deliveries or messages, by name, with its counts.
    async fn tenants(&self) -> Result<Vec<TenantStats>>;
}

/// Conveniences over [`Ledger`], for every store (never implement it: the blanket impl
/// covers every `Ledger`, `dyn` ones included).
#[async_trait]
pub trait LedgerExt: Ledger {
    /// Remove finished deliveries completed before `before` (at most `limit`, 1–10000),
    /// and messages left without deliveries created before `before`, for one tenant in
    /// rotation: [`Ledger::purge_expired`] with one cutoff for every tenant.
    ///
    /// # Cancel safety
    /// As [`Ledger::purge_expired`].
    async fn purge_completed(&self, before: Timestamp, limit: u32) -> Result<PurgeReport> {
        self.purge_expired(&RetentionCutoffs::uniform(before), limit)
            .await
    }
}

impl<T: Ledger + ?Sized> LedgerExt for T {}
