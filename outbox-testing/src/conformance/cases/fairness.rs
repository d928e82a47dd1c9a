//! Fair claiming and endpoint exclusion: a backlog in one group (a tenant and a destination)
//! does not hold back another group's fresh work, and an excluded endpoint's deliveries are
//! left exactly as they were.

use std::collections::BTreeMap;

use outboxkit_core::{ClaimRequest, Claimed, DeliveryStatus, Destination, TenantId};

use super::helpers::*;
use crate::conformance::Fixture;

/// How many of `claims` went to each (tenant, destination) group.
fn shares(claims: &[Claimed]) -> BTreeMap<(TenantId, Destination), usize> {
    let mut m = BTreeMap::new();
    for c in claims {
        *m.entry((c.delivery.tenant.clone(), c.delivery.destination.clone()))
            .or_insert(0) += 1;
    }
    m
}

/// A claim that excludes an endpoint takes none of its deliveries and leaves them pending
/// with no attempt spent; the next claim without the exclusion takes them.
pub async fn claim_skips_excluded_endpoints(fx: Fixture) {
    let t = tenant("acme");
    let open = add_endpoint(&fx, "acme", "order.*").await;
    let tripped = add_endpoint(&fx, "acme", "order.*").await;
    for _ in 0..3 {
        enqueue(&fx, msg("order.created").tenant("acme")).await;
    }
    let excluding = for_webhooks().exclude_endpoints([tripped.id]);
    let got = claim(&fx, &excluding).await;
    assert_eq!(
        got.len(),
        3,
        "every delivery to the open endpoint is claimed"
    );
    assert!(
        got.iter()
            .all(|c| c.delivery.destination == Destination::Webhook(open.id)),
        "nothing to the excluded endpoint is claimed"
    );
    claim_none(&fx, &excluding).await;
    let waiting = list_all(&fx, &t, &Default::default())
        .await
        .into_iter()
        .filter(|d| d.destination == Destination::Webhook(tripped.id))
        .collect::<Vec<_>>();
    assert_eq!(waiting.len(), 3);
    for d in &waiting {
        assert_eq!(
            (d.status, d.attempts, d.next_attempt_at, d.lease_until),
            (DeliveryStatus::Pending, 0, d.created_at, None),
            "an excluded delivery is left exactly as it was"
        );
    }
    let later = claim(&fx, &for_webhooks()).await;
    assert_eq!(later.len(), 3);
    assert!(later
        .iter()
        .all(|c| c.delivery.destination == Destination::Webhook(tripped.id)));
}

/// With a backlog in one group, another group's newer delivery is in the very next claim,
/// for a group that differs by destination and for one that differs by tenant; the
/// backlog's share comes oldest first.
pub async fn claim_gives_every_group_a_turn(fx: Fixture) {
    let busy = add_consumer(&fx, "busy", "bulk.*").await;
    let quiet = add_consumer(&fx, "quiet", "ping.*").await;
    let mut backlog = Vec::new();
    for i in 0..20 {
        backlog.push(
            enqueue(
                &fx,
                msg("bulk.item").tenant("big").ordering_key(format!("k{i}")),
            )
            .await,
        );
    }
    fx.clock().advance(secs(1));
    let fresh_dest = enqueue(&fx, msg("ping.one").tenant("big")).await;
    let fresh_tenant = enqueue(&fx, msg("bulk.item").tenant("small")).await;
    let req = ClaimRequest::new(5, LEASE)
        .handler(busy.clone(), 10)
        .handler(quiet.clone(), 10);
    let got = claim(&fx, &req).await;
    assert_eq!(got.len(), 5);
    let messages: Vec<_> = got.iter().map(|c| c.message.id).collect();
    assert!(
        messages.contains(&fresh_dest.message_id),
        "another destination's fresh delivery is not held back by the backlog: {messages:?}"
    );
    assert!(
        messages.contains(&fresh_tenant.message_id),
        "another tenant's fresh delivery is not held back by the backlog"
    );
    let backlog_taken: Vec<_> = got
        .iter()
        .filter(|c| {
            c.delivery.tenant == tenant("big")
                && c.delivery.destination == Destination::Handler(busy.clone())
        })
        .map(|c| c.message.id)
        .collect();
    let mut sorted = backlog_taken.clone();
    sorted.sort_by_key(|id| backlog.iter().position(|e| e.message_id == *id));
    assert_eq!(
        sorted,
        backlog[..3]
            .iter()
            .map(|e| e.message_id)
            .collect::<Vec<_>>(),
        "the backlog's share is its three oldest"
    );
}

/// Two groups with backlogs share a batch within one of each other, even when every
/// delivery of one is older than every delivery of the other; a group with fewer due
/// deliveries than its share leaves the rest to the others.
pub async fn claim_shares_a_batch_between_backlogs(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    for i in 0..12 {
        enqueue(
            &fx,
            msg("a.item").tenant("alpha").ordering_key(format!("a{i}")),
        )
        .await;
    }
    fx.clock().advance(secs(1));
    for i in 0..12 {
        enqueue(
            &fx,
            msg("b.item").tenant("beta").ordering_key(format!("b{i}")),
        )
        .await;
    }
    fx.clock().advance(secs(1));
    enqueue(&fx, msg("c.item").tenant("gamma")).await;
    let req = ClaimRequest::new(9, LEASE).handler(c.clone(), 10);
    let got = claim(&fx, &req).await;
    assert_eq!(got.len(), 9);
    let by_tenant: BTreeMap<String, usize> = shares(&got)
        .into_iter()
        .map(|((t, _), n)| (t.as_str().to_owned(), n))
        .collect();
    assert_eq!(
        by_tenant,
        [
            ("alpha".to_owned(), 4),
            ("beta".to_owned(), 4),
            ("gamma".to_owned(), 1)
        ]
        .into_iter()
        .collect(),
        "rounds of one per group: gamma's single delivery, then alpha and beta alternately"
    );
    let rest = claim(&fx, &ClaimRequest::new(100, LEASE).handler(c, 10)).await;
    assert_eq!(rest.len(), 16, "the remaining backlog is claimable");
}

/// A claim with a room of `n` for an endpoint takes at most `n` of its deliveries (its
/// oldest), still claims the other endpoints' deliveries, keeps the fair-round order, and
/// leaves the rest exactly as they were; a per-endpoint limit caps every endpoint without a
/// room of its own; a limit of 0 is refused.
pub async fn claim_takes_no_more_than_an_endpoint_has_room_for(fx: Fixture) {
    let t = tenant("acme");
    let busy = add_endpoint(&fx, "acme", "bulk.*").await;
    let quiet = add_endpoint(&fx, "acme", "ping.*").await;
    let mut backlog = Vec::new();
    for _ in 0..20 {
        backlog.push(
            enqueue(&fx, msg("bulk.item").tenant("acme"))
                .await
                .message_id,
        );
    }
    fx.clock().advance(secs(1));
    let mut pings = Vec::new();
    for _ in 0..3 {
        pings.push(
            enqueue(&fx, msg("ping.one").tenant("acme"))
                .await
                .message_id,
        );
    }
    let got = claim(&fx, &for_webhooks().endpoint_room(busy.id, 3)).await;
    let order: Vec<_> = got.iter().map(|c| c.message.id).collect();
    assert_eq!(
        order,
        vec![backlog[0], pings[0], backlog[1], pings[1], backlog[2], pings[2]],
        "three of the busy endpoint (its oldest), every delivery of the other, in rounds"
    );
    let capped = claim(&fx, &for_webhooks().endpoint_limit(2)).await;
    assert_eq!(
        capped.iter().map(|c| c.message.id).collect::<Vec<_>>(),
        backlog[3..5].to_vec(),
        "the per-endpoint limit caps an endpoint without a room of its own"
    );
    let room = claim(
        &fx,
        &for_webhooks().endpoint_limit(5).endpoint_room(busy.id, 1),
    )
    .await;
    assert_eq!(
        room.iter().map(|c| c.message.id).collect::<Vec<_>>(),
        vec![backlog[5]],
        "an endpoint's room overrides the limit"
    );
    claim_none(&fx, &for_webhooks().endpoint_room(busy.id, 0)).await;
    let waiting: Vec<_> = list_all(&fx, &t, &Default::default())
        .await
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .collect();
    assert_eq!(waiting.len(), 14, "the rest wait");
    for d in &waiting {
        assert_eq!(d.destination, Destination::Webhook(busy.id));
        assert_eq!(
            (d.attempts, d.lease_until),
            (0, None),
            "a delivery left out for want of room spends no attempt"
        );
    }
    let err = fx
        .store()
        .claim(&for_webhooks().endpoint_limit(0))
        .await
        .expect_err("a per-endpoint limit of 0 is refused");
    assert_eq!(err.kind(), outboxkit_core::ErrorKind::InvalidInput);
    let rest = claim(&fx, &for_webhooks()).await;
    assert_eq!(rest.len(), 14, "without a room, the rest are claimed");
    assert_eq!(
        got.iter()
            .filter(|c| c.delivery.destination == Destination::Webhook(quiet.id))
            .count(),
        3
    );
}
