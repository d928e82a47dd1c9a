//! [`OperatorStore`]: the calls an operator makes by hand (the admin API, the CLI) and the
//! counts behind gauges; never the dispatcher's hot path.

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{DeliveryId, EndpointId, MessageId, TenantId};

use super::{CancelReport, Stats};

/// Releases, replays, retries and resets deliveries by hand, and counts them.
///
/// # Contract
/// - `release_held` MUST make every `held` delivery of the endpoint `pending` and due now,
///   and no other (`release_held_makes_due_now`); "now" is the later of now and the
///   delivery's message's `available_at`, so a delayed message keeps its time
///   (`release_held_keeps_a_delayed_message_until_its_time`).
/// - `replay` MUST give only a `dead` delivery a fresh budget, due now; any other status is
///   a `Conflict`, an unknown id `NotFound` (`replay_only_dead`), and so is another tenant's
///   delivery (`replay_across_tenants_is_not_found`). It starts a new run and keeps the
///   earlier attempts (`replay_starts_a_new_run`).
/// - `retry_now` MUST make a `pending` or `held` delivery due now, as `pending`, keeping its
///   attempts; any other status is a `Conflict` (`retry_now_makes_due`).
/// - `reset` MUST give only a `held` delivery a fresh budget, due now; else `Conflict`, and
///   `NotFound` across tenants (`reset_held_gives_fresh_budget`).
/// - `cancel` MUST make a `pending` (`cancel_pending_makes_it_dead`) or `held`
///   (`cancel_held_makes_it_dead`) delivery finished `dead` with reason `cancelled`, its
///   attempts and ledger kept; an in-flight one (`processing`, `sending`) is a `Conflict`
///   (`cancel_in_flight_is_a_conflict`), a finished one a `Conflict`
///   (`cancel_finished_is_a_conflict`), another tenant's or an unknown id `NotFound`
///   (`cancel_across_tenants_is_not_found`); nothing changes on an error. A cancelled
///   delivery no longer holds back later deliveries of its ordering key
///   (`cancel_releases_the_key_barrier`), and `replay` sends it again
///   (`replay_after_cancel_sends_again`).
/// - `cancel_message` MUST cancel every `pending` or `held` delivery of the message in one
///   atomic step and count the others as skipped; an unknown message, or another tenant's,
///   is `NotFound` (`cancel_message_cancels_what_waits`,
///   `cancel_message_across_tenants_is_not_found`).
/// - `stats` MUST count every delivery by status over every tenant, with the oldest due one
///   (`stats_counts_and_oldest_due_age`,
///   `stats_oldest_due_counts_a_deleted_consumers_deliveries`).
/// - `queue_stats` MUST equal `stats()` with `succeeded` and `dead` set to 0
///   (`queue_stats_are_the_unfinished_part_of_stats`).
/// - `tenant_stats` MUST count only that tenant (and endpoint)
///   (`stats_are_scoped_by_tenant_and_endpoint`).
/// - Every call that makes work due MUST wake the store's listener, and so MUST a `cancel`,
///   which may free its key's next delivery (`wake_listener_wakes_on_operator_calls`).
///
/// # Cancel safety
/// Each change is one atomic step: a dropped call has made it whole or not at all, and the
/// caller cannot tell which. Each method says what a retry meets.
#[async_trait]
pub trait OperatorStore: Send + Sync + fmt::Debug + 'static {
    /// Make every `held` delivery of the endpoint `pending`, due at the later of now and its
    /// message's `available_at`; returns how many.
    ///
    /// # Cancel safety
    /// Cancel safe: a retry releases what is still held (0 after a finished call).
    async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64>;

    /// Give a `dead` delivery a fresh budget, due now. Any other status is a `Conflict`;
    /// another tenant's delivery is `NotFound`.
    ///
    /// # Cancel safety
    /// Written whole or not at all; a retry after a replay that was written is a `Conflict`
    /// (the delivery is no longer `dead`), never a second run.
    async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Make a `pending` or `held` delivery due now (as `pending`), keeping its attempts.
    /// Any other status is a `Conflict`.
    ///
    /// # Cancel safety
    /// Cancel safe: a retry makes the delivery due now again, or is a `Conflict` when it
    /// was claimed in between.
    async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Reset a `held` delivery by hand to a fresh budget (seed 000 `retryDelivery`): it
    /// becomes `pending`, due now, with attempts and snoozes 0; its ledger is kept. Any other
    /// status is a `Conflict`; another tenant's delivery is `NotFound`.
    ///
    /// # Cancel safety
    /// Written whole or not at all; a retry after a reset that was written is a `Conflict`
    /// (the delivery is no longer `held`).
    async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Cancel a `pending` or `held` delivery before it is sent: it becomes finished `dead`
    /// with reason [`crate::DeadReason::Cancelled`], spending no attempt; its ledger is kept
    /// and `replay` sends it again. An in-flight (`processing`, `sending`) or finished
    /// delivery is a `Conflict`; another tenant's delivery is `NotFound`.
    ///
    /// # Cancel safety
    /// Written whole or not at all; a retry after a cancel that was written is a `Conflict`
    /// (the delivery is finished).
    async fn cancel(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()>;

    /// Cancel every `pending` or `held` delivery of a message in one atomic step, as
    /// [`OperatorStore::cancel`] does one; the others (in flight or finished) are counted as
    /// skipped. An unknown message, or another tenant's, is `NotFound`.
    ///
    /// # Cancel safety
    /// Written whole or not at all; a retry after a call that was written cancels nothing
    /// and counts every delivery as skipped.
    async fn cancel_message(&self, tenant: &TenantId, message: MessageId) -> Result<CancelReport>;

    /// Counts by status and the age of the oldest due delivery.
    async fn stats(&self) -> Result<Stats>;

    /// The unfinished part of [`OperatorStore::stats`], for gauges read at every scrape:
    /// the `pending`, `processing`, `sending` and `held` counts and the oldest due delivery,
    /// with `succeeded` and `dead` left at 0 (not counted).
    ///
    /// # Contract
    /// - It MUST equal `stats()` with `succeeded` and `dead` set to 0
    ///   (`queue_stats_are_the_unfinished_part_of_stats`).
    /// - Its cost SHOULD grow with the unfinished deliveries only, never with the finished
    ///   history kept for the ledger: a scrape of a store holding millions of finished
    ///   deliveries stays as cheap as one of an empty store.
    async fn queue_stats(&self) -> Result<Stats>;

    /// [`OperatorStore::stats`] over one tenant's deliveries only, and only those to
    /// `endpoint` when given (an endpoint of another tenant counts nothing).
    async fn tenant_stats(&self, tenant: &TenantId, endpoint: Option<EndpointId>) -> Result<Stats>;
}
