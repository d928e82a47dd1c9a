//! Building the rows of an enqueue: the message and one delivery per matching
//! consumer, per matching endpoint of the tenant (a paused or disabled one's delivery waits,
//! `held` for the endpoint), per e-mail recipient. Stores read
//! consumers and endpoints inside their transaction and write what this returns.

use crate::endpoint::{Consumer, ConsumerStatus, Endpoint};
use crate::ids::{DeliveryId, MessageId};
use crate::model::{Delivery, Destination, Message, ValidMessage};
use crate::time::{Entropy, Timestamp};

/// The message row of a validated message, with a fresh id.
pub fn message_row(valid: &ValidMessage, now: Timestamp, entropy: &dyn Entropy) -> Message {
    Message {
        id: MessageId::generate(now, entropy),
        topic: valid.topic.clone(),
        payload: valid.payload.clone(),
        tenant: valid.tenant.clone(),
        ordering_key: valid.ordering_key.clone(),
        idempotency_key: valid.idempotency_key.clone(),
        available_at: valid.available_at,
        headers: valid.headers.clone(),
        cause: valid.cause.clone(),
        created_at: now,
    }
}

/// Where `message` fans out: consumers by name, then endpoints oldest first, then e-mail
/// recipients in the order given. Endpoints of other tenants and non-matching filters get
/// nothing; paused and disabled endpoints get their deliveries, which
/// [`hold_for_endpoints`] then makes wait.
pub fn destinations(
    message: &Message,
    valid: &ValidMessage,
    consumers: &[Consumer],
    endpoints: &[Endpoint],
) -> Vec<Destination> {
    let mut consumers: Vec<&Consumer> = consumers
        .iter()
        .filter(|c| c.filter.matches(&message.topic))
        .collect();
    consumers.sort_by(|a, b| a.name.cmp(&b.name));
    let mut endpoints: Vec<&Endpoint> = endpoints
        .iter()
        .filter(|e| e.receives(&message.tenant, &message.topic))
        .collect();
    endpoints.sort_by_key(|e| (e.created_at, e.id));
    consumers
        .into_iter()
        .map(|c| Destination::Handler(c.name.clone()))
        .chain(endpoints.into_iter().map(|e| Destination::Webhook(e.id)))
        .chain(valid.emails.iter().cloned().map(Destination::Email))
        .collect()
}

/// The delivery rows of `message`, one per destination, with fresh ids.
pub fn delivery_rows(
    message: &Message,
    destinations: Vec<Destination>,
    entropy: &dyn Entropy,
) -> Vec<Delivery> {
    destinations
        .into_iter()
        .map(|d| {
            Delivery::new(
                DeliveryId::generate(message.created_at, entropy),
                message,
                d,
            )
        })
        .collect()
}

/// Whether `d` goes to a strict-FIFO endpoint of `endpoints` (its barrier is then
/// [`crate::claim_rules::FIFO_BARRIER`], [`crate::claim_rules::barrier_key`]).
pub fn is_fifo(d: &Delivery, endpoints: &[Endpoint]) -> bool {
    d.endpoint()
        .is_some_and(|id| endpoints.iter().any(|e| e.id == id && e.fifo))
}

/// Make the deliveries to paused or disabled endpoints wait: `held` until
/// [`crate::EndpointStatus::hold_until`] (never claimed while paused; dead as
/// `endpoint-disabled` when a disabled endpoint's hold expires). Others are unchanged.
pub fn hold_for_endpoints(rows: &mut [Delivery], endpoints: &[Endpoint], now: Timestamp) {
    for d in rows {
        let Some(id) = d.endpoint() else { continue };
        if let Some(until) = endpoints
            .iter()
            .find(|e| e.id == id)
            .and_then(|e| e.status.hold_until(now))
        {
            d.status = crate::model::DeliveryStatus::Held;
            d.next_attempt_at = until;
        }
    }
}

/// Make the deliveries to paused consumers wait: `held`, due never, until the consumer is
/// resumed ([`ConsumerStatus::hold_until`]). Others are unchanged.
pub fn hold_for_consumers(rows: &mut [Delivery], consumers: &[Consumer]) {
    for d in rows {
        let Destination::Handler(name) = &d.destination else {
            continue;
        };
        if let Some(until) = consumers
            .iter()
            .find(|c| &c.name == name)
            .and_then(|c| c.status.hold_until())
        {
            d.status = crate::model::DeliveryStatus::Held;
            d.next_attempt_at = until;
        }
    }
}

/// Whether any consumer is paused (a store may skip [`hold_for_consumers`] otherwise).
pub fn any_paused(consumers: &[Consumer]) -> bool {
    consumers.iter().any(|c| c.status == ConsumerStatus::Paused)
}
