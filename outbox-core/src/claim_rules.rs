//! The claim rules of DESIGN §6, written once: every store that claims in Rust calls these
//! functions, and every store that claims in SQL or Lua mirrors them exactly (the
//! conformance suite compares each store's claims against [`fair_order`] on random
//! backlogs: `claim_order_follows_the_fair_rounds`).
//!
//! - **Exhausted rows** ([`is_exhausted`], [`EXHAUSTED_PER_CLAIM`]): a due, served, not-held
//!   row whose attempts reached its source's budget dies at claim time and is never handed
//!   out; one claim kills at most [`EXHAUSTED_PER_CLAIM`] of them, and successive claims kill
//!   the rest.
//! - **The per-key barrier** ([`barrier_blocks`]): a delivery with an ordering key waits
//!   while an older unfinished delivery to the same tenant and destination with the same key
//!   exists, unless that older one's topic is dormant. A delivery to a strict-FIFO endpoint
//!   ([`Endpoint::fifo`](crate::Endpoint)) is barred by [`FIFO_BARRIER`] instead of its key
//!   ([`barrier_key`], fixed at fan-out): one slot for all of the endpoint's deliveries, so
//!   at most one is claimed at a time, in enqueue order, whatever their keys.
//! - **Fair rounds** ([`fair_order`]): the due rows are grouped by (tenant, destination);
//!   each group offers its claimable rows in due order, at most [`group_limit`] of them; the
//!   groups are ordered by their first row's due key; the claim takes round by round (the
//!   first row of every group, then the second of every group, …) until the batch is full.
//!
//! Topic matching is [`TopicFilter::matches`](crate::ids::TopicFilter) and the hold of a
//! paused or disabled endpoint's deliveries at enqueue is
//! [`fanout::hold_for_endpoints`](crate::fanout::hold_for_endpoints).

use std::collections::BTreeSet;

use crate::claim::{ClaimRequest, Lease};
use crate::ids::ClaimToken;
use crate::ids::Topic;
use crate::model::{DeadReason, Delivery, DeliveryStatus, Destination};
use crate::time::Timestamp;

/// The most exhausted rows one claim kills (§6.5). A claim never hands out a row past its
/// budget, so the rows beyond this bound wait, unclaimable, for the next claim to kill them:
/// a backlog of spent rows costs each claim a bounded amount of work. A claim kills at least
/// `min(exhausted, EXHAUSTED_PER_CLAIM)` of the due exhausted rows it serves; a store split in
/// shards (Redis Cluster) keeps the bound per shard.
pub const EXHAUSTED_PER_CLAIM: usize = 1000;

/// Whether a claimable row dies at this claim: served by the request, due, not held (a held
/// probe spends no attempt) and at or past its source's budget.
pub fn is_exhausted(
    request: &ClaimRequest,
    destination: &Destination,
    status: DeliveryStatus,
    attempts: u32,
    due: bool,
) -> bool {
    due && status != DeliveryStatus::Held
        && request.serves(destination)
        && request
            .budget_for(destination)
            .is_some_and(|budget| attempts >= budget)
}

/// [`is_exhausted`] for a whole row at `now`.
pub fn row_is_exhausted(request: &ClaimRequest, d: &Delivery, now: Timestamp) -> bool {
    let due = d.next_attempt_at <= now;
    is_exhausted(request, &d.destination, d.status, d.attempts, due)
}

/// What a claim writes to an exhausted row (§6.5): dead of `max_attempts`, finished `now`,
/// no lease.
pub fn kill(d: &mut Delivery, now: Timestamp) {
    d.status = DeliveryStatus::Dead;
    d.dead_reason = Some(DeadReason::MaxAttempts);
    d.completed_at = Some(now);
    d.lease_until = None;
    d.updated_at = now;
}

/// What a claim writes to a row it hands out (§6.1): `processing` until `until` (which is
/// also when a stranded claim is due again), an attempt spent unless the row was `held` (a
/// held probe is free). Returns the lease, fenced by `token`.
pub fn lease(d: &mut Delivery, token: ClaimToken, now: Timestamp, until: Timestamp) -> Lease {
    let claimed_from = d.status;
    if claimed_from != DeliveryStatus::Held {
        d.attempts = d.attempts.saturating_add(1);
    }
    d.status = DeliveryStatus::Processing;
    d.lease_until = Some(until);
    d.next_attempt_at = until;
    d.updated_at = now;
    Lease {
        delivery_id: d.id,
        tenant: d.tenant.clone(),
        token,
        until,
        attempts: d.attempts,
        snoozes: d.snoozes,
        claimed_from,
    }
}

/// Whether a delivery with an ordering key waits: some older unfinished delivery of its
/// (tenant, destination, key) slot has a topic that is not dormant. `older_topics` are the
/// topics of the older unfinished deliveries of the slot.
pub fn barrier_blocks<'a>(
    older_topics: impl IntoIterator<Item = &'a Topic>,
    dormant: &BTreeSet<Topic>,
) -> bool {
    older_topics.into_iter().any(|t| !dormant.contains(t))
}

/// The barrier text every delivery to a strict-FIFO endpoint carries in place of its
/// ordering key: a space, which no ordering key holds, so no message's key shares the slot.
pub const FIFO_BARRIER: &str = " fifo";

/// The barrier slot key of a delivery (§6.4), fixed when it is written: [`FIFO_BARRIER`] for
/// a delivery to a strict-FIFO endpoint (`fifo`), whatever its key; else its ordering key;
/// `None` (never barred) for an unkeyed delivery to any other destination.
pub fn barrier_key(ordering_key: Option<&str>, fifo: bool) -> Option<&str> {
    if fifo {
        Some(FIFO_BARRIER)
    } else {
        ordering_key
    }
}

/// How many rows a group of `destination` may offer one claim: the batch, or less when the
/// request gives the endpoint less room.
pub fn group_limit(request: &ClaimRequest, destination: &Destination) -> usize {
    (request.batch_size() as usize).min(request.group_limit(destination))
}

/// The groups that can get a turn when there are more groups than the batch (every e-mail
/// recipient is one): the first `batch` distinct groups of the claimable rows walked in due
/// order. [`fair_order`] gives each of them one row in the first round and the others none, so
/// a store need not read every group's head.
pub fn first_groups<G: Eq + std::hash::Hash + Clone>(
    claimable_in_due_order: impl IntoIterator<Item = G>,
    batch: usize,
) -> Vec<G> {
    let mut seen = std::collections::HashSet::new();
    let rows = claimable_in_due_order.into_iter();
    rows.filter(|g| seen.insert(g.clone()))
        .take(batch)
        .collect()
}

/// The fair-round order (§6.1): `groups` are each group's first-row key and its claimable
/// rows in due order (already cut to [`group_limit`]); the result is at most `batch` rows,
/// taken round by round over the groups in the order of their keys (ties keep the order
/// given).
pub fn fair_order<K: Ord, T>(mut groups: Vec<(K, Vec<T>)>, batch: usize) -> Vec<T> {
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let mut queues: Vec<std::vec::IntoIter<T>> = groups
        .into_iter()
        .map(|(_, rows)| rows.into_iter())
        .collect();
    let mut out = Vec::with_capacity(batch.min(1024));
    while out.len() < batch {
        let before = out.len();
        for q in &mut queues {
            if out.len() >= batch {
                break;
            }
            if let Some(row) = q.next() {
                out.push(row);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::{ConsumerName, EndpointId};

    #[test]
    fn rounds_take_the_first_of_every_group_then_the_second() {
        let groups = vec![
            (2, vec!["b1", "b2", "b3"]),
            (1, vec!["a1", "a2"]),
            (3, vec!["c1"]),
        ];
        assert_eq!(
            fair_order(groups.clone(), 10),
            ["a1", "b1", "c1", "a2", "b2", "b3"]
        );
        assert_eq!(fair_order(groups.clone(), 4), ["a1", "b1", "c1", "a2"]);
        assert_eq!(fair_order(groups, 2), ["a1", "b1"]);
        assert!(fair_order::<u8, &str>(vec![], 5).is_empty());
        assert!(fair_order(vec![(1, vec!["x"])], 0).is_empty());
    }

    #[test]
    fn first_groups_are_the_first_distinct_groups_in_due_order() {
        let rows = ["b", "a", "b", "c", "a", "d"];
        assert_eq!(first_groups(rows, 3), ["b", "a", "c"]);
        assert_eq!(first_groups(rows, 10), ["b", "a", "c", "d"]);
        assert!(first_groups(rows, 0).is_empty());
    }

    #[test]
    fn a_fifo_delivery_is_barred_by_the_fifo_slot_whatever_its_key() {
        assert_eq!(barrier_key(Some("k"), true), Some(FIFO_BARRIER));
        assert_eq!(barrier_key(None, true), Some(FIFO_BARRIER));
        assert_eq!(barrier_key(Some("k"), false), Some("k"));
        assert_eq!(barrier_key(None, false), None);
        assert!(crate::OrderingKey::new(FIFO_BARRIER).is_err());
    }

    #[test]
    fn equal_keys_keep_the_order_given() {
        let groups = vec![(1, vec!["p1", "p2"]), (1, vec!["q1"])];
        assert_eq!(fair_order(groups, 3), ["p1", "q1", "p2"]);
    }

    #[test]
    fn exhausted_means_due_served_unheld_and_spent() {
        let c = ConsumerName::new("worker").unwrap();
        let req = ClaimRequest::new(10, Duration::from_secs(30)).handler(c.clone(), 3);
        let d = Destination::Handler(c);
        let other = Destination::Handler(ConsumerName::new("other").unwrap());
        assert!(is_exhausted(&req, &d, DeliveryStatus::Pending, 3, true));
        assert!(is_exhausted(&req, &d, DeliveryStatus::Processing, 4, true));
        assert!(!is_exhausted(&req, &d, DeliveryStatus::Pending, 2, true));
        assert!(!is_exhausted(&req, &d, DeliveryStatus::Pending, 3, false));
        assert!(!is_exhausted(&req, &d, DeliveryStatus::Held, 9, true));
        assert!(!is_exhausted(
            &req,
            &other,
            DeliveryStatus::Pending,
            9,
            true
        ));
        let e = EndpointId::parse("0190a6b8-6c1e-7a2b-8c3d-4e5f60718293").unwrap();
        let webhooks = ClaimRequest::new(10, Duration::from_secs(30))
            .webhooks(2)
            .exclude_endpoints([e]);
        assert!(
            !is_exhausted(
                &webhooks,
                &Destination::Webhook(e),
                DeliveryStatus::Pending,
                5,
                true
            ),
            "an excluded endpoint's rows are not this claim's to kill"
        );
    }

    fn delivery(status: DeliveryStatus, attempts: u32) -> Delivery {
        use crate::ids::{DeliveryId, MessageId, TenantId};
        use crate::model::Message;
        let at = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        let message = Message {
            id: MessageId::parse("0190b2a0-0000-7000-8000-000000000001").unwrap(),
            topic: Topic::new("order.created").unwrap(),
            payload: b"{}".to_vec(),
            tenant: TenantId::new("acme").unwrap(),
            ordering_key: None,
            idempotency_key: None,
            available_at: at,
            headers: Default::default(),
            cause: None,
            created_at: at,
        };
        let id = DeliveryId::parse("0190b2a0-0000-7000-8000-000000000002").unwrap();
        let handler = Destination::Handler(ConsumerName::new("worker").unwrap());
        let mut d = Delivery::new(id, &message, handler);
        d.status = status;
        d.attempts = attempts;
        d
    }

    #[test]
    fn a_lease_spends_an_attempt_unless_the_row_was_held() {
        let now = Timestamp::from_unix_millis(1_700_000_001_000).unwrap();
        let until = now.saturating_add(Duration::from_secs(30));
        let token = ClaimToken::from_uuid(uuid::Uuid::from_u128(7));
        for (from, spent) in [(DeliveryStatus::Pending, 3), (DeliveryStatus::Held, 2)] {
            let mut d = delivery(from, 2);
            let lease = lease(&mut d, token, now, until);
            assert_eq!((d.status, d.attempts), (DeliveryStatus::Processing, spent));
            assert_eq!((d.lease_until, d.next_attempt_at), (Some(until), until));
            assert_eq!(d.updated_at, now);
            assert_eq!((lease.claimed_from, lease.attempts), (from, spent));
            assert_eq!(
                (lease.token, lease.until, lease.delivery_id),
                (token, until, d.id)
            );
        }
    }

    #[test]
    fn a_killed_row_is_dead_of_max_attempts_without_a_lease() {
        let now = Timestamp::from_unix_millis(1_700_000_001_000).unwrap();
        let mut d = delivery(DeliveryStatus::Processing, 3);
        d.lease_until = Some(now);
        let req = ClaimRequest::new(10, Duration::from_secs(30))
            .handler(ConsumerName::new("worker").unwrap(), 3);
        assert!(row_is_exhausted(&req, &d, now));
        kill(&mut d, now);
        assert_eq!(d.status, DeliveryStatus::Dead);
        assert_eq!(d.dead_reason, Some(DeadReason::MaxAttempts));
        assert_eq!((d.completed_at, d.lease_until), (Some(now), None));
    }

    #[test]
    fn only_a_live_older_topic_blocks() {
        let a = Topic::new("order.created").unwrap();
        let b = Topic::new("order.legacy").unwrap();
        let dormant: BTreeSet<Topic> = [b.clone()].into();
        assert!(!barrier_blocks([], &dormant));
        assert!(!barrier_blocks([&b], &dormant));
        assert!(barrier_blocks([&b, &a], &dormant));
        assert!(barrier_blocks([&b], &BTreeSet::new()));
    }

    #[test]
    fn a_group_offers_at_most_the_batch_or_its_room() {
        let e = EndpointId::parse("0190a6b8-6c1e-7a2b-8c3d-4e5f60718293").unwrap();
        let req = ClaimRequest::new(10, Duration::from_secs(30))
            .webhooks(5)
            .endpoint_room(e, 3);
        assert_eq!(group_limit(&req, &Destination::Webhook(e)), 3);
        let wide = ClaimRequest::new(10, Duration::from_secs(30)).webhooks(5);
        assert_eq!(group_limit(&wide, &Destination::Webhook(e)), 10);
    }
}
