//! [`EventTypeStore`]: the event-type catalogue and its mode.

use std::fmt;

use async_trait::async_trait;

use crate::catalogue::{CatalogueMode, EventType, NewEventType};
use crate::error::Result;
use crate::ids::Topic;

/// The event-type catalogue: registered topics with a description and an optional JSON
/// Schema, and the [`CatalogueMode`] every enqueue path of the store enforces. Global, like
/// consumers (topics are the product's, not a tenant's).
///
/// # Contract
/// - A type read back (`get_event_type`, `list_event_types` by topic) MUST equal what was
///   put, `created_at` kept across a replacement; `delete_event_type` MUST remove it and a
///   missing one is `NotFound` (`event_types_round_trip`).
/// - A schema that does not compile MUST be `InvalidInput` and write nothing
///   (`event_type_with_a_bad_schema_writes_nothing`).
/// - In mode `off` (the default) every enqueue MUST be accepted as before
///   (`catalogue_off_accepts_anything`).
/// - In `refuse-unknown` and `validate`, `enqueue`, `enqueue_batch` and the adapter's
///   `enqueue_in` MUST refuse a topic that is not registered with `InvalidInput` and write
///   nothing: no message, no delivery (`refuse_unknown_refuses_and_writes_nothing`); a
///   batch with one such message MUST write none (`catalogue_refuses_a_batch_whole`).
/// - In `validate` a payload that fails its type's schema MUST be `InvalidInput` naming the
///   failing instance path, never a value, and a valid one MUST be accepted
///   (`validate_refuses_a_failing_payload_naming_the_path`).
/// - A change made through another handle of the same backend MUST be enforced: at once
///   when it accepts more (a refusal is checked against a fresh read), within
///   [`crate::catalogue::CACHE_MAX_AGE`] of the store's clock when it refuses more
///   (`a_catalogue_change_through_another_handle_is_enforced`).
///
/// # Cancel safety
/// Each write is one atomic step: a dropped call has made it whole or not at all; every
/// write is an upsert or a delete, so a retry ends in the same catalogue (a retried delete
/// is `NotFound`).
#[async_trait]
pub trait EventTypeStore: Send + Sync + fmt::Debug + 'static {
    /// Register a type or replace the one of its topic (its `created_at` is kept); returns
    /// it as stored.
    ///
    /// # Cancel safety
    /// All or nothing; a retry writes the same type.
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType>;
    /// Read one (`NotFound` when it is not registered).
    async fn get_event_type(&self, topic: &Topic) -> Result<EventType>;
    /// Every type, by topic.
    async fn list_event_types(&self) -> Result<Vec<EventType>>;
    /// Remove one (`NotFound` when it is not registered).
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a delete that was written is `NotFound`.
    async fn delete_event_type(&self, topic: &Topic) -> Result<()>;
    /// The mode (`off` until one is set).
    async fn catalogue_mode(&self) -> Result<CatalogueMode>;
    /// Set the mode.
    ///
    /// # Cancel safety
    /// Cancel safe: a retry sets the same mode.
    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()>;
}
