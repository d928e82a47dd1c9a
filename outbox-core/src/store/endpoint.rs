//! [`EndpointStore`]: webhook endpoints and in-process consumers.

use std::fmt;

use async_trait::async_trait;

use crate::endpoint::{Consumer, ConsumerStatus, Endpoint, EndpointUpdate};
use crate::error::Result;
use crate::ids::{ConsumerName, EndpointId, TenantId};

/// Webhook endpoints and in-process consumers.
///
/// # Contract
/// - Every read and write is scoped by tenant; another tenant's endpoint is `NotFound`
///   (`tenant_isolation_of_endpoints`).
/// - `update_endpoint` with a new URL or secret, or a status set to active, MUST release the
///   endpoint's held deliveries in the same step (`secret_rotation_releases_held`,
///   `url_change_releases_held`, `paused_endpoint_holds_then_resumes_in_order`); one that
///   pauses or disables it MUST make its `pending` and `held` deliveries `held` until
///   [`EndpointUpdate::holds_until`] in the same step (`pause_holds_queued_deliveries`).
///   Releasing is decided by [`EndpointUpdate::releases_held`] on the status after the
///   update: a new URL or secret of a paused or disabled endpoint MUST leave its waiting
///   deliveries and their hold as they were (`rotating_a_waiting_endpoints_secret_keeps_its_hold`).
///   A released delivery is due at the later of now and its message's `available_at`: a
///   delayed message published while the endpoint waited is not sent before its time
///   (`resume_keeps_a_delayed_message_until_its_time`,
///   `secret_rotation_releases_a_probe_now_not_a_delayed_message`).
/// - `delete_endpoint` MUST make the endpoint's held deliveries `pending`, due now (or at
///   their message's later `available_at`), so the
///   next claim ends them as `endpoint-removed` (`deleted_endpoint_gets_nothing`).
/// - `create_endpoint` with an id that exists MUST fail with `Conflict`
///   (`endpoint_crud_round_trip`).
/// - An endpoint read back MUST equal what was written; a description or rate limit out of
///   range MUST be `InvalidInput` and write nothing (`endpoints_round_trip`); it shows its
///   last delivery (`endpoint_shows_last_delivery`); `fifo` round-trips through create,
///   update, read and list (`fifo_flag_round_trips`).
/// - Custom headers MUST read back exactly, in order, and updates apply them as
///   [`EndpointUpdate::apply`] does (`endpoint_headers_round_trip`); a list that fails
///   [`crate::endpoint::check_headers`], on create or after an update, MUST be `InvalidInput`
///   and write nothing (`bad_endpoint_headers_change_nothing`).
/// - `put_consumer` MUST upsert by name and `list_consumers` list by name
///   (`consumers_upsert_and_list`); it MUST keep an existing consumer's status (a restart
///   never un-pauses) and write a new one `active` (`put_consumer_keeps_a_pause`).
/// - `set_consumer_status` to paused MUST make the consumer's `pending` deliveries `held`,
///   due never, in the same step, and an enqueue while it is paused MUST write its delivery
///   `held`; no attempt is spent and a claim hands none of them out
///   (`paused_consumer_holds_pending_and_new`). Resuming MUST release its held deliveries,
///   due at the later of now and their message's `available_at`, claimed in enqueue order
///   (`resumed_consumer_releases_in_order`, `resumed_consumer_keeps_a_delayed_message`). An
///   unknown consumer is `NotFound` and changes nothing (`pausing_an_unknown_consumer_is_not_found`).
///
/// # Cancel safety
/// Each write is one atomic step (the endpoint with its deliveries' holds and releases): a
/// dropped call has made it whole or not at all. Each method says what a retry meets.
#[async_trait]
pub trait EndpointStore: Send + Sync + fmt::Debug + 'static {
    /// Store a new endpoint.
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a create that was written is a `Conflict`.
    async fn create_endpoint(&self, endpoint: &Endpoint) -> Result<()>;
    /// Read one.
    async fn get_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<Endpoint>;
    /// Every endpoint of a tenant, oldest first.
    async fn list_endpoints(&self, tenant: &TenantId) -> Result<Vec<Endpoint>>;
    /// Change one; returns it as stored.
    ///
    /// # Cancel safety
    /// All or nothing; a retry of the same update ends in the same endpoint and holds.
    async fn update_endpoint(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: &EndpointUpdate,
    ) -> Result<Endpoint>;
    /// Remove one (its pending and held deliveries become due and die as
    /// `endpoint-removed` when next claimed).
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a delete that was written is `NotFound`.
    async fn delete_endpoint(&self, tenant: &TenantId, id: EndpointId) -> Result<()>;
    /// Register or update a consumer (upsert by name).
    ///
    /// # Cancel safety
    /// Cancel safe: an upsert, so a retry writes the same consumer.
    async fn put_consumer(&self, consumer: &Consumer) -> Result<()>;
    /// Every consumer, by name.
    async fn list_consumers(&self) -> Result<Vec<Consumer>>;
    /// Remove a consumer (its deliveries stay; no new ones fan out to it).
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a delete that was written is `NotFound`.
    async fn delete_consumer(&self, name: &ConsumerName) -> Result<()>;
    /// Pause or resume a consumer (holding or releasing its deliveries); returns it as
    /// stored.
    ///
    /// # Cancel safety
    /// All or nothing; a retry sets the same status (releasing or holding nothing more).
    async fn set_consumer_status(
        &self,
        name: &ConsumerName,
        status: ConsumerStatus,
    ) -> Result<Consumer>;
}
