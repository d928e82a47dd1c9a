//! [`MessageStore`]: writing messages and their fan-out.

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::model::NewMessage;

use super::Enqueued;

/// Writes messages and their fan-out.
///
/// # Contract
/// - `enqueue` MUST validate the message and write nothing on any error
///   (`invalid_message_writes_nothing`).
/// - It MUST write the message and one `pending` delivery per matching consumer, per
///   matching endpoint of the tenant, per e-mail recipient, atomically (`fan_out_at_enqueue`);
///   a paused or disabled endpoint's delivery is written `held` for it
///   ([`crate::fanout::hold_for_endpoints`], `paused_endpoint_holds_then_resumes_in_order`).
/// - A message with the `(tenant, topic, idempotency key)` of an earlier one MUST write
///   nothing and return the earlier id with `duplicate: true` (`idempotent_enqueue`), also
///   when the two race (`idempotent_enqueue_under_concurrency`).
/// - `enqueue_batch` MUST validate every message before writing any
///   (`batch_enqueue_is_all_or_nothing`).
/// - A message read back (`get_message`, `claim`) MUST equal what was enqueued, payload byte
///   for byte, at every limit's edge (`messages_round_trip_byte_for_byte`), its cause
///   included (`caused_by_round_trips`).
///
/// # Cancel safety
/// A dropped call has written the message (every message, for a batch) with all its
/// deliveries, or nothing. Only a message with an idempotency key is safe to send again:
/// a retry then answers `duplicate: true` with the first id; one without a key may be
/// written twice.
#[async_trait]
pub trait MessageStore: Send + Sync + fmt::Debug + 'static {
    /// Write one message and its deliveries in a transaction of its own.
    ///
    /// # Cancel safety
    /// All or nothing; retry safely only with an idempotency key (see the trait).
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued>;

    /// Write many messages in one transaction.
    ///
    /// # Cancel safety
    /// All or nothing for the whole batch; retry safely only with idempotency keys.
    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>>;
}
