//! [`DeliveryStore`]: the hot path the dispatcher calls per delivery, and its conveniences
//! in [`DeliveryStoreExt`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::claim::{ClaimRequest, Claimed, Completion, Lease, ReleaseReport};
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{EndpointId, TenantId};
use crate::permits::Permits;
use crate::time::Timestamp;
use crate::wake::WakeListener;

/// Claims, completes and releases deliveries: the calls the dispatcher makes per delivery,
/// and nothing else (the operator's calls are [`crate::OperatorStore`]).
///
/// # Contract
/// - `claim` MUST refuse a request that names no source with `InvalidInput` and change
///   nothing (`empty_allowlist_is_refused`).
/// - `claim` MUST take only due deliveries (`pending` or `held` with `next_attempt_at <= now`,
///   or `processing`/`sending` whose lease ended), served by the request and not excluded,
///   oldest first by `(next_attempt_at, enqueue order)`, at most `batch_size`
///   (`claim_takes_due_oldest_first_up_to_batch`, `delayed_message_appears_when_due`,
///   `claim_skips_excluded_endpoints`, `claim_serves_only_named_sources`).
/// - A claimed delivery becomes `processing` with a fresh token and
///   `lease_until = next_attempt_at = now + lease`; `attempts + 1` unless claimed from `held`
///   (`held_probe_spends_no_attempt`, `stranded_claim_is_claimable_after_lease`).
/// - Concurrent claims MUST never hand out one delivery twice while its lease is live
///   (`claim_is_exclusive`).
/// - Deliveries at or past their source's budget MUST be moved to `dead` (`max_attempts`) at
///   claim time and never returned (`exhausted_rows_die_at_claim`,
///   `claim_kills_exhausted_rows_beyond_its_batch`, `claim_budget_is_per_source`).
/// - A delivery with an ordering key MUST NOT be claimed while an older unfinished delivery
///   of the same tenant, destination and key exists whose topic is not dormant
///   (`ordering_key_is_fifo_per_destination`, `dormant_topic_does_not_block`). A delivery to
///   a strict-FIFO endpoint ([`crate::Endpoint::fifo`] when it was written or replayed) is
///   barred by [`crate::claim_rules::FIFO_BARRIER`] instead of its key: at most one of the
///   endpoint's deliveries is claimed at a time, in enqueue order (the `fifo_*` cases:
///   `fifo_endpoint_delivers_one_at_a_time_in_enqueue_order`,
///   `fifo_held_head_and_paused_endpoint_hold_everything_behind`,
///   `fifo_stranded_head_is_claimed_again_first`,
///   `fifo_exhausted_head_dies_and_the_next_is_claimed`,
///   `fifo_dormant_topic_does_not_hold_the_endpoint`,
///   `fifo_endpoint_leaves_the_batch_to_other_groups`, `fifo_replay_takes_its_first_place`,
///   `fifo_toggle_applies_to_deliveries_enqueued_afterwards`).
/// - `complete_many`, `release`, `extend` and `mark_sending` with a token that no longer
///   matches MUST change nothing and fail with `LeaseLost` (`stale_token_is_fenced`); so MUST
///   a lease whose tenant is not the delivery's (`forged_tenant_lease_is_fenced`). A lease
///   whose time ran out but whose token still matches MUST be accepted
///   (`late_completion_with_matching_token_is_accepted`).
/// - `complete_many` MUST write [`Lease::settle`], append the attempt to the ledger, and
///   disable the endpoint on `Dead { Gone }` in one atomic step per item (`verdict_*` cases),
///   and answer one result per item, in order (`complete_many_mixed_results`).
/// - `release` MUST refund the attempt and make the delivery due after the delay
///   (`release_refunds_and_delays`); `extend` MUST keep the lease alive
///   (`extend_keeps_lease_alive`); a delivery left `sending` past its lease MUST be flagged
///   when claimed again (`mark_sending_then_stranded_send_is_flagged`).
/// - Deliveries to a paused or disabled endpoint are `held` for it (due at
///   [`crate::EndpointStatus::hold_until`]: never while paused), so `claim` does not take them
///   until the endpoint is resumed, and takes a disabled endpoint's only when its hold expires
///   (`paused_endpoint_holds_then_resumes_in_order`, `disabled_endpoint_holds_until_reenabled`,
///   `disabled_endpoint_hold_expires`). Completing with [`crate::Verdict::AwaitEndpoint`] MUST
///   write [`crate::DeliveryUpdate::endpoint_is_back`] when the endpoint is active or gone by
///   then (`await_endpoint_after_resume_is_pending`).
/// - `take_permits` MUST grant at most `rate` permits per endpoint of a tenant in any
///   half-open second of `now`s, counted across every handle on the backend, each permit
///   freed one second after it was granted, by [`crate::PermitLog::take`]'s rule; refuse a
///   rate outside 1 to [`crate::endpoint::MAX_RATE_LIMIT`] with `InvalidInput`
///   (`permits_up_to_the_rate_then_wait`, `permits_free_a_second_after_each_grant`,
///   `permits_are_shared_by_handles_on_one_backend`, `permits_are_per_endpoint_and_tenant`,
///   `permits_refuse_a_bad_rate`).
/// - `wake_listener`, when it returns one, MUST be woken by an enqueue and by the operator's
///   calls that make work due (`wake_listener_wakes_on_enqueue`,
///   `wake_listener_wakes_on_operator_calls`).
///
/// # Cancel safety
/// Every write here is atomic per delivery: a call whose future is dropped has either
/// written a delivery's change whole or not at all, and the caller cannot tell which.
/// The lease fences every retry, so none is ever applied twice; each method says what a
/// retry after a cancellation meets.
#[async_trait]
pub trait DeliveryStore: Send + Sync + fmt::Debug + 'static {
    /// Take up to `batch_size` due deliveries.
    ///
    /// # Cancel safety
    /// Not cancel safe: deliveries claimed by a dropped call stay `processing` under leases
    /// nobody holds, and are claimable again only when those leases end
    /// (`stranded_claim_is_claimable_after_lease`). No delivery is lost or handed out twice.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Claimed>>;

    /// End many claims; one result per item, in order. The outer error means nothing is
    /// known to have been written. The dispatcher completes through this call only.
    ///
    /// # Cancel safety
    /// Each item is written whole or not at all. A retry of a written item fails with
    /// `LeaseLost` (its token is spent) and changes nothing, so retrying the whole call
    /// after a cancellation is safe.
    async fn complete_many(&self, items: &[(Lease, Completion)]) -> Result<Vec<Result<()>>>;

    /// Put unstarted claims back ([`Lease::release`]), due after `delay`.
    ///
    /// # Cancel safety
    /// Each lease is released whole or not at all; a retry counts an already released lease
    /// as `lost` and changes nothing. A lease neither released nor retried ends on its own.
    async fn release(&self, leases: &[Lease], delay: Duration) -> Result<ReleaseReport>;

    /// Extend a lease to `now + by` (a heartbeat); returns the lease with its new end.
    ///
    /// # Cancel safety
    /// Cancel safe: the lease ends either at its old time or at the new one; a retry sets
    /// the new end again from the store's `now`.
    async fn extend(&self, lease: &Lease, by: Duration) -> Result<Lease>;

    /// Mark an e-mail delivery `sending` just before the send (so a crash mid-send is never
    /// retried blind).
    ///
    /// # Cancel safety
    /// Cancel safe: marking is idempotent while the lease holds, so retry before sending.
    /// Do not send after a cancelled call that was not retried: the delivery may still be
    /// `processing`, and a crash would then retry it blind.
    async fn mark_sending(&self, lease: &Lease) -> Result<()>;

    /// Take up to `want` start permits for `endpoint` of `tenant` under its `rate` (per
    /// second) at `now` (the injected clock): how many were granted, and when the next
    /// frees. Every dispatcher on the backend shares them, so a rate limit holds across
    /// relays. Each store keeps the grants of the last second per endpoint (bounded: at most
    /// one run per millisecond).
    ///
    /// # Cancel safety
    /// Atomic: a dropped call granted all of its permits or none, and the caller cannot tell
    /// which; a lost grant only delays later starts (never lets more through).
    async fn take_permits(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits>;

    /// A listener woken when work may have arrived (an enqueue, a release); `None` when the
    /// store cannot tell and dispatchers rely on polling.
    fn wake_listener(&self) -> Option<WakeListener> {
        None
    }

    /// How many claims one dispatcher may have in flight at once (at least 1; 1, the
    /// default, where claims queue behind each other anyway: one writer thread, one server
    /// thread, a store in memory). More where the backend runs claims in parallel, so a
    /// second claim uses what the first leaves idle (PostgreSQL: a connection and a server
    /// process each). Claims in flight together never take more than the dispatcher has room
    /// for, and at most one of them asks for webhooks or e-mail (whose per-endpoint caps
    /// count what the run holds), so the store's own rules are all they rely on: they are
    /// claims of one backend racing, as those of two dispatchers do. The dispatcher sends
    /// the second only after a claim came back full, so an idle queue is claimed once per
    /// wake-up.
    fn parallel_claims(&self) -> usize {
        1
    }
}

/// Conveniences over [`DeliveryStore`], for every store (never implement it: the blanket
/// impl covers every `DeliveryStore`, `dyn` ones included).
#[async_trait]
pub trait DeliveryStoreExt: DeliveryStore {
    /// End one claim with a verdict: [`DeliveryStore::complete_many`] of one item.
    ///
    /// # Cancel safety
    /// As [`DeliveryStore::complete_many`]: written whole or not at all; a retry of a
    /// written completion fails with `LeaseLost`.
    async fn complete(&self, lease: &Lease, completion: &Completion) -> Result<()> {
        let mut out = self
            .complete_many(&[(lease.clone(), completion.clone())])
            .await?;
        out.pop().unwrap_or_else(|| {
            Err(Error::new(
                ErrorKind::Unexpected,
                "complete_many returned no result",
            ))
        })
    }
}

impl<T: DeliveryStore + ?Sized> DeliveryStoreExt for T {}
