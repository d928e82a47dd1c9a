//! Strict FIFO per endpoint (`Endpoint::fifo`, core's `claim_rules::barrier_key`): a FIFO
//! endpoint's deliveries go one at a time in enqueue order, whatever their ordering keys.
//! On a store whose shards split keys (`Fixture::keys_split_over_shards`) the messages carry
//! no ordering key: FIFO holds per shard there.

use std::collections::BTreeSet;

use outboxkit_core::{
    Claimed, DeadReason, DeliveryFilter, DeliveryStatus, EndpointStatus, EndpointUpdate, MessageId,
    OperatorStore as _, TenantId, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A FIFO endpoint of the default tenant receiving every topic.
async fn fifo_endpoint(fx: &Fixture) -> outboxkit_core::Endpoint {
    let mut e = endpoint_row(fx, "default", "*");
    e.fifo = true;
    fx.store()
        .create_endpoint(&e)
        .await
        .expect("create_endpoint");
    e
}

/// The messages of `claims` to endpoint `e`.
fn to(e: &outboxkit_core::Endpoint, claims: &[Claimed]) -> Vec<MessageId> {
    claims
        .iter()
        .filter(|c| c.delivery.endpoint() == Some(e.id))
        .map(|c| c.message.id)
        .collect()
}

/// Enqueue messages with these ordering keys, a millisecond apart; their ids in order.
async fn backlog(fx: &Fixture, keys: &[Option<&str>]) -> Vec<MessageId> {
    let mut out = Vec::new();
    for k in keys {
        fx.clock().advance(std::time::Duration::from_millis(1));
        let mut m = msg("order.created");
        if let Some(k) = k.filter(|_| !fx.keys_split_over_shards()) {
            m = m.ordering_key(k);
        }
        out.push(enqueue(fx, m).await.message_id);
    }
    out
}

/// `m` with ordering key `k`, unless the fixture's shards split keys.
fn keyed(fx: &Fixture, m: outboxkit_core::NewMessage, k: &str) -> outboxkit_core::NewMessage {
    if fx.keys_split_over_shards() {
        m
    } else {
        m.ordering_key(k)
    }
}

fn set_fifo(on: bool) -> EndpointUpdate {
    EndpointUpdate {
        fifo: Some(on),
        ..Default::default()
    }
}

/// A FIFO endpoint's deliveries are claimed one at a time in enqueue order across keys (a
/// plain endpoint beside it gets one per key at once); a retried head holds everything
/// behind it, and a succeeded or dead head lets the next go.
pub async fn fifo_endpoint_delivers_one_at_a_time_in_enqueue_order(fx: Fixture) {
    let fifo = fifo_endpoint(&fx).await;
    let plain = add_endpoint(&fx, "default", "*").await;
    let m = backlog(&fx, &[Some("a"), Some("b"), None, Some("a")]).await;
    let first = claim(&fx, &for_webhooks()).await;
    assert_eq!(to(&fifo, &first), [m[0]], "only the oldest is in flight");
    let plain_got: BTreeSet<_> = to(&plain, &first).into_iter().collect();
    let mut per_key = BTreeSet::from([m[0], m[1], m[2]]);
    if fx.keys_split_over_shards() {
        per_key.insert(m[3]);
    }
    assert_eq!(plain_got, per_key, "per key");
    let head = first
        .iter()
        .find(|c| c.delivery.endpoint() == Some(fifo.id));
    let head = head.expect("the FIFO head").clone();
    claim_none(&fx, &for_webhooks()).await;

    complete_with(
        &fx,
        &head,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(10)),
        },
        None,
    )
    .await;
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(10));
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(again.message.id, m[0], "a retried head keeps its place");
    complete_with(&fx, &again, Verdict::Succeeded, None).await;

    let second = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(second.message.id, m[1], "a key's order does not matter");
    let dead = Verdict::Dead {
        reason: DeadReason::Permanent,
    };
    complete_with(&fx, &second, dead, None).await;
    let third = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(third.message.id, m[2], "a dead head lets the next go");
    complete_with(&fx, &third, Verdict::Succeeded, None).await;
    let fourth = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(fourth.message.id, m[3]);
}

/// A held head (401/403) holds the FIFO endpoint's queue until a probe succeeds; a paused
/// FIFO endpoint, resumed, sends its backlog in enqueue order, one at a time.
pub async fn fifo_held_head_and_paused_endpoint_hold_everything_behind(fx: Fixture) {
    let fifo = fifo_endpoint(&fx).await;
    let m = backlog(&fx, &[Some("a"), Some("b")]).await;
    let head = claim_one(&fx, &for_webhooks()).await;
    let probe_at = now(&fx).saturating_add(secs(60));
    complete_with(&fx, &head, Verdict::Held { probe_at }, None).await;
    fx.clock().advance(secs(30));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(30));
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(probe.message.id, m[0], "the probe is the held head");
    complete_with(&fx, &probe, Verdict::Succeeded, None).await;
    let next = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(next.message.id, m[1]);
    complete_with(&fx, &next, Verdict::Succeeded, None).await;

    let t = TenantId::default();
    let pause = EndpointUpdate {
        status: Some(EndpointStatus::Paused),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&t, fifo.id, &pause)
        .await
        .expect("pause");
    // One batch (the stores' batch fan-out): its order is the batch's.
    let keyed = |k: &str| keyed(&fx, msg("a.b"), k);
    let batch = vec![keyed("x"), msg("a.b"), keyed("y")];
    let later = fx
        .store()
        .enqueue_batch(batch)
        .await
        .expect("enqueue_batch");
    let later: Vec<MessageId> = later.iter().map(|e| e.message_id).collect();
    claim_none(&fx, &for_webhooks()).await;
    let resume = EndpointUpdate {
        status: Some(EndpointStatus::Active),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&t, fifo.id, &resume)
        .await
        .expect("resume");
    for want in later {
        let got = claim(&fx, &for_webhooks()).await;
        assert_eq!(to(&fifo, &got), [want], "one at a time after the resume");
        complete_with(&fx, &got[0], Verdict::Succeeded, None).await;
    }
    claim_none(&fx, &for_webhooks()).await;
}

/// A head whose lease ran out is claimed again, still first, and alone.
pub async fn fifo_stranded_head_is_claimed_again_first(fx: Fixture) {
    fifo_endpoint(&fx).await;
    let m = backlog(&fx, &[None, Some("k"), None]).await;
    let head = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(head.message.id, m[0]);
    fx.clock().advance(LEASE + secs(1));
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(again.message.id, m[0], "the stranded head, alone");
    assert_eq!(again.delivery.attempts, 2);
}

/// A head past its budget dies at claim time and the same claim hands out the next one.
pub async fn fifo_exhausted_head_dies_and_the_next_is_claimed(fx: Fixture) {
    fifo_endpoint(&fx).await;
    let m = backlog(&fx, &[Some("a"), Some("b"), None]).await;
    let one = outboxkit_core::ClaimRequest::new(10, LEASE).webhooks(1);
    let head = claim_one(&fx, &one).await;
    assert_eq!(head.message.id, m[0]);
    fx.clock().advance(LEASE + secs(1));
    let next = claim_one(&fx, &one).await;
    assert_eq!(
        next.message.id, m[1],
        "the spent head died and let the next go"
    );
    let t = TenantId::default();
    let d = delivery(&fx, &t, head.delivery.id).await;
    assert_eq!(d.status, DeliveryStatus::Dead);
    assert_eq!(d.dead_reason, Some(DeadReason::MaxAttempts));
}

/// An older unfinished delivery of a dormant topic does not hold a FIFO endpoint back (the
/// per-key rule: an abandoned producer's rows never block for ever).
pub async fn fifo_dormant_topic_does_not_hold_the_endpoint(fx: Fixture) {
    fifo_endpoint(&fx).await;
    enqueue(&fx, msg("legacy.event").delay(secs(86_400))).await;
    let fresh = enqueue(&fx, keyed(&fx, msg("order.created"), "k")).await;
    claim_none(&fx, &for_webhooks()).await;
    let dormant = for_webhooks().dormant_topics([topic("legacy.event")]);
    let got = claim_one(&fx, &dormant).await;
    assert_eq!(got.message.id, fresh.message_id);
}

/// A FIFO endpoint takes one row of a claim and leaves the rest of the batch to the other
/// groups: fair rounds are unchanged.
pub async fn fifo_endpoint_leaves_the_batch_to_other_groups(fx: Fixture) {
    let fifo = fifo_endpoint(&fx).await;
    let plain = add_endpoint(&fx, "default", "*").await;
    let c = add_consumer(&fx, "worker", "*").await;
    let m = backlog(&fx, &[None, None, None, None]).await;
    let req = outboxkit_core::ClaimRequest::new(6, LEASE)
        .webhooks(6)
        .handler(c, 10);
    let got = claim(&fx, &req).await;
    assert_eq!(to(&fifo, &got), [m[0]]);
    assert_eq!(
        got.len(),
        6,
        "the FIFO endpoint's one, the others fill the batch"
    );
    assert!(to(&plain, &got).len() >= 2);
}

/// A replayed dead delivery is a new run in its first place: it goes before the FIFO
/// endpoint's deliveries still waiting (none of them is in flight), after those already
/// sent.
pub async fn fifo_replay_takes_its_first_place(fx: Fixture) {
    fifo_endpoint(&fx).await;
    let m = backlog(&fx, &[None, Some("k"), None]).await;
    let a = claim_one(&fx, &for_webhooks()).await;
    let dead = Verdict::Dead {
        reason: DeadReason::Permanent,
    };
    complete_with(&fx, &a, dead, None).await;
    let b = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(b.message.id, m[1]);
    complete_with(&fx, &b, Verdict::Succeeded, None).await;
    let t = TenantId::default();
    fx.store().replay(&t, a.delivery.id).await.expect("replay");
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(again.message.id, m[0], "the replay, alone");
    assert_eq!(again.delivery.run, 2);
    complete_with(&fx, &again, Verdict::Succeeded, None).await;
    let c = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(c.message.id, m[2]);
}

/// The flag is read at fan-out: turning FIFO on leaves the backlog as it was enqueued and
/// serializes the deliveries enqueued afterwards; turning it off frees later ones.
pub async fn fifo_toggle_applies_to_deliveries_enqueued_afterwards(fx: Fixture) {
    let e = add_endpoint(&fx, "default", "*").await;
    let t = TenantId::default();
    let before = backlog(&fx, &[None, None]).await;
    let on = fx.store().update_endpoint(&t, e.id, &set_fifo(true)).await;
    assert!(on.expect("fifo on").fifo);
    let after = backlog(&fx, &[Some("a"), Some("b")]).await;
    let got: BTreeSet<_> = to(&e, &claim(&fx, &for_webhooks()).await)
        .into_iter()
        .collect();
    assert_eq!(got, BTreeSet::from([before[0], before[1], after[0]]));
    let off = fx.store().update_endpoint(&t, e.id, &set_fifo(false)).await;
    assert!(!off.expect("fifo off").fifo);
    let free = backlog(&fx, &[None, None]).await;
    let got: BTreeSet<_> = to(&e, &claim(&fx, &for_webhooks()).await)
        .into_iter()
        .collect();
    assert_eq!(
        got,
        BTreeSet::from([free[0], free[1]]),
        "{after:?} still waits"
    );
    let waiting = DeliveryFilter {
        status: Some(DeliveryStatus::Pending),
        ..Default::default()
    };
    let left = list_all(&fx, &t, &waiting).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id, after[1]);
}

/// `fifo` round-trips through create, update, read and list.
pub async fn fifo_flag_round_trips(fx: Fixture) {
    let e = fifo_endpoint(&fx).await;
    let t = TenantId::default();
    let read = fx.store().get_endpoint(&t, e.id).await.expect("read");
    assert!(read.fifo);
    let listed = fx.store().list_endpoints(&t).await.expect("list");
    assert!(listed.iter().any(|x| x.id == e.id && x.fifo));
    let other = fx
        .store()
        .update_endpoint(
            &t,
            e.id,
            &EndpointUpdate {
                description: Some("renamed".to_owned()),
                ..Default::default()
            },
        )
        .await
        .expect("update");
    assert!(other.fifo, "an update without the flag keeps it");
    fx.store()
        .update_endpoint(&t, e.id, &set_fifo(false))
        .await
        .expect("fifo off");
    let read = fx.store().get_endpoint(&t, e.id).await.expect("read");
    assert!(!read.fifo);
    let plain = add_endpoint(&fx, "default", "*").await;
    let read = fx.store().get_endpoint(&t, plain.id).await.expect("read");
    assert!(!read.fifo);
}
