//! Operator calls (replay, retry now, release held), endpoints, consumers and tenant
//! isolation.

use outboxkit_core::{
    Consumer, DeadReason, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointStatus,
    EndpointUpdate, EndpointUrl, ErrorKind, HandlerOutcome, OsEntropy, Outcome, SealedSecret,
    TopicFilter, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// Only a `dead` delivery can be replayed: it comes back `pending`, due now, with a fresh
/// budget; anything else is a `Conflict`, an unknown id `NotFound`.
pub async fn replay_only_dead(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("a.one")).await;
    enqueue(&fx, msg("a.two").delay(secs(600))).await;
    let t = Default::default();
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_kind(
        fx.store().replay(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "replay processing",
    );
    let policy = handler_policy(8);
    let snooze = Outcome::Handler(HandlerOutcome::Snooze(secs(5)));
    settle(&fx, &got, snooze, &policy).await;
    fx.clock().advance(secs(5));
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!((got.lease.attempts, got.lease.snoozes), (1, 1));
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Discard),
        &policy,
    )
    .await;
    let pending = list_all(
        &fx,
        &t,
        &DeliveryFilter {
            status: Some(DeliveryStatus::Pending),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(pending.len(), 1);
    assert_kind(
        fx.store().replay(&t, pending[0].id).await,
        ErrorKind::Conflict,
        "replay pending",
    );
    fx.clock().advance(secs(30));
    fx.store()
        .replay(&t, got.delivery.id)
        .await
        .expect("replay dead");
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.snoozes),
        (DeliveryStatus::Pending, 0, 0)
    );
    assert_eq!(d.next_attempt_at, now(&fx));
    assert_eq!(
        (d.dead_reason, d.completed_at, d.lease_until),
        (None, None, None)
    );
    let again = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(again.delivery.id, got.delivery.id);
    assert_eq!(again.lease.attempts, 1);
    settle(&fx, &again, Outcome::Handler(HandlerOutcome::Ok), &policy).await;
    assert_kind(
        fx.store().replay(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "replay succeeded",
    );
    let unknown = DeliveryId::generate(now(&fx), &OsEntropy);
    assert_kind(
        fx.store().replay(&t, unknown).await,
        ErrorKind::NotFound,
        "replay unknown",
    );
}

/// Another tenant's delivery is `NotFound` for replay, retry now, reads and its ledger,
/// and nothing changes.
pub async fn replay_across_tenants_is_not_found(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let e = enqueue(&fx, msg("order.created").tenant("alpha")).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Discard),
        &handler_policy(8),
    )
    .await;
    let (alpha, beta) = (tenant("alpha"), tenant("beta"));
    let id = got.delivery.id;
    let before = delivery(&fx, &alpha, id).await;
    assert_kind(
        fx.store().replay(&beta, id).await,
        ErrorKind::NotFound,
        "replay as another tenant",
    );
    assert_kind(
        fx.store().retry_now(&beta, id).await,
        ErrorKind::NotFound,
        "retry_now as another tenant",
    );
    assert_kind(
        fx.store().get_delivery(&beta, id).await,
        ErrorKind::NotFound,
        "get_delivery as another tenant",
    );
    assert_kind(
        fx.store().attempts(&beta, id).await,
        ErrorKind::NotFound,
        "attempts as another tenant",
    );
    assert_kind(
        fx.store().get_message(&beta, e.message_id).await,
        ErrorKind::NotFound,
        "get_message as another tenant",
    );
    assert_eq!(delivery(&fx, &alpha, id).await, before);
    fx.store()
        .replay(&alpha, id)
        .await
        .expect("replay as the owner");
    assert_eq!(
        delivery(&fx, &alpha, id).await.status,
        DeliveryStatus::Pending
    );
}

/// `retry_now` makes a `pending` or `held` delivery `pending` and due now, keeping its
/// attempts; any other status is a `Conflict`.
pub async fn retry_now_makes_due(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created").delay(secs(3600))).await;
    let t = Default::default();
    claim_none(&fx, &for_consumer(&c)).await;
    let waiting = list_all(
        &fx,
        &t,
        &DeliveryFilter {
            consumer: Some(c.clone()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(waiting.len(), 1);
    fx.clock().advance(secs(5));
    fx.store()
        .retry_now(&t, waiting[0].id)
        .await
        .expect("retry_now pending");
    let d = delivery(&fx, &t, waiting[0].id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 0, now(&fx))
    );
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_kind(
        fx.store().retry_now(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now processing",
    );
    settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Ok),
        &handler_policy(8),
    )
    .await;
    assert_kind(
        fx.store().retry_now(&t, got.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now succeeded",
    );

    fx.clock().advance(secs(3600));
    let hook = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &hook, http(401), &webhook_policy()).await;
    fx.store()
        .retry_now(&t, hook.delivery.id)
        .await
        .expect("retry_now held");
    let d = delivery(&fx, &t, hook.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 1, now(&fx))
    );
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(
        (again.lease.attempts, again.lease.claimed_from),
        (2, DeliveryStatus::Pending)
    );
    settle(&fx, &again, http(410), &webhook_policy()).await;
    assert_kind(
        fx.store().retry_now(&t, hook.delivery.id).await,
        ErrorKind::Conflict,
        "retry_now dead",
    );
    let unknown = DeliveryId::generate(now(&fx), &OsEntropy);
    assert_kind(
        fx.store().retry_now(&t, unknown).await,
        ErrorKind::NotFound,
        "retry_now unknown",
    );
}

/// Ledger reads are scoped by tenant.
pub async fn tenant_isolation_of_ledger(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let mut by_tenant = Vec::new();
    for name in ["alpha", "beta"] {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(
                enqueue(&fx, msg("order.created").tenant(name))
                    .await
                    .message_id,
            );
        }
        by_tenant.push((tenant(name), ids));
    }
    let got = claim(&fx, &for_consumer(&c)).await;
    for g in &got {
        settle(
            &fx,
            g,
            Outcome::Handler(HandlerOutcome::Retry),
            &handler_policy(8),
        )
        .await;
    }
    for (i, (t, ids)) in by_tenant.iter().enumerate() {
        let (other, other_ids) = &by_tenant[1 - i];
        let mine = list_all(&fx, t, &DeliveryFilter::default()).await;
        assert_eq!(mine.len(), 3);
        assert!(mine
            .iter()
            .all(|d| &d.tenant == t && ids.contains(&d.message_id)));
        for d in &mine {
            assert_kind(
                fx.store().get_delivery(other, d.id).await,
                ErrorKind::NotFound,
                "get_delivery",
            );
            assert_kind(
                fx.store().attempts(other, d.id).await,
                ErrorKind::NotFound,
                "attempts",
            );
            assert_eq!(
                fx.store().attempts(t, d.id).await.expect("attempts").len(),
                1
            );
        }
        for m in other_ids {
            assert_kind(
                fx.store().get_message(t, *m).await,
                ErrorKind::NotFound,
                "get_message",
            );
        }
    }
    assert!(list_all(&fx, &tenant("gamma"), &DeliveryFilter::default())
        .await
        .is_empty());
}

/// Endpoint reads and writes are scoped by tenant: another tenant's endpoint is
/// `NotFound` and unchanged; `release_held` across tenants releases nothing.
pub async fn tenant_isolation_of_endpoints(fx: Fixture) {
    let e = add_endpoint(&fx, "alpha", "*").await;
    let (alpha, beta) = (tenant("alpha"), tenant("beta"));
    enqueue(&fx, msg("order.created").tenant("alpha")).await;
    let got = claim_one(&fx, &for_webhooks()).await;
    settle(&fx, &got, http(401), &webhook_policy()).await;
    // The completion recorded its status on the endpoint; that is the state beta's calls
    // must leave alone.
    let e = fx
        .store()
        .get_endpoint(&alpha, e.id)
        .await
        .expect("get_endpoint");
    assert_eq!(
        e.last_delivery.as_ref().and_then(|l| l.status_code),
        Some(401)
    );
    let rename = EndpointUpdate {
        description: Some("taken over".to_owned()),
        ..Default::default()
    };
    assert_kind(
        fx.store().get_endpoint(&beta, e.id).await,
        ErrorKind::NotFound,
        "get_endpoint",
    );
    assert_kind(
        fx.store().update_endpoint(&beta, e.id, &rename).await,
        ErrorKind::NotFound,
        "update_endpoint",
    );
    assert_kind(
        fx.store().delete_endpoint(&beta, e.id).await,
        ErrorKind::NotFound,
        "delete_endpoint",
    );
    assert!(fx
        .store()
        .list_endpoints(&beta)
        .await
        .expect("list_endpoints")
        .is_empty());
    match fx.store().release_held(&beta, e.id).await {
        Ok(n) => assert_eq!(n, 0),
        Err(err) => assert_eq!(err.kind(), ErrorKind::NotFound),
    }
    assert_eq!(
        delivery(&fx, &alpha, got.delivery.id).await.status,
        DeliveryStatus::Held
    );
    assert_eq!(
        fx.store()
            .get_endpoint(&alpha, e.id)
            .await
            .expect("get_endpoint"),
        e
    );
    assert_eq!(
        fx.store()
            .list_endpoints(&alpha)
            .await
            .expect("list_endpoints"),
        vec![e]
    );
}

async fn held_delivery(fx: &Fixture) -> (outboxkit_core::Endpoint, DeliveryId) {
    let e = add_endpoint(fx, "acme", "*").await;
    enqueue(fx, msg("order.created").tenant("acme")).await;
    let got = claim_one(fx, &for_webhooks()).await;
    settle(fx, &got, http(403), &webhook_policy()).await;
    (e, got.delivery.id)
}

/// Rotating the secret releases the endpoint's held deliveries in the same step; other
/// updates do not.
pub async fn secret_rotation_releases_held(fx: Fixture) {
    let (e, id) = held_delivery(&fx).await;
    let acme = tenant("acme");
    let rename = EndpointUpdate {
        description: Some("renamed".to_owned()),
        ..Default::default()
    };
    let ep = fx
        .store()
        .update_endpoint(&acme, e.id, &rename)
        .await
        .expect("rename");
    assert_eq!(ep.description, "renamed");
    assert_eq!(delivery(&fx, &acme, id).await.status, DeliveryStatus::Held);
    fx.clock().advance(secs(5));
    let new_secret = SealedSecret(vec![9, 9, 9, 9]);
    let rotate = EndpointUpdate {
        rotate_secret: Some(new_secret.clone()),
        ..Default::default()
    };
    let ep = fx
        .store()
        .update_endpoint(&acme, e.id, &rotate)
        .await
        .expect("rotate");
    assert_eq!(ep.secret, new_secret);
    assert_eq!(ep.previous_secret, Some(e.secret.clone()));
    assert_eq!(ep.updated_at, now(&fx));
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, e.id)
            .await
            .expect("get_endpoint"),
        ep
    );
    let d = delivery(&fx, &acme, id).await;
    assert_eq!(
        (d.status, d.attempts, d.next_attempt_at),
        (DeliveryStatus::Pending, 1, now(&fx))
    );
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!((got.delivery.id, got.lease.attempts), (id, 2));
    let drop = EndpointUpdate {
        drop_previous_secret: true,
        ..Default::default()
    };
    let ep = fx
        .store()
        .update_endpoint(&acme, e.id, &drop)
        .await
        .expect("drop previous");
    assert_eq!((ep.secret, ep.previous_secret), (new_secret, None));
}

/// Changing the URL releases the endpoint's held deliveries in the same step.
pub async fn url_change_releases_held(fx: Fixture) {
    let (e, id) = held_delivery(&fx).await;
    let acme = tenant("acme");
    let url = EndpointUrl::parse("https://fixed.example.com/hooks").expect("url");
    let update = EndpointUpdate {
        url: Some(url.clone()),
        ..Default::default()
    };
    let ep = fx
        .store()
        .update_endpoint(&acme, e.id, &update)
        .await
        .expect("update url");
    assert_eq!(ep.url, url);
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, e.id)
            .await
            .expect("get_endpoint")
            .url,
        url
    );
    let d = delivery(&fx, &acme, id).await;
    assert_eq!(
        (d.status, d.next_attempt_at),
        (DeliveryStatus::Pending, now(&fx))
    );
    assert_eq!(claim_one(&fx, &for_webhooks()).await.delivery.id, id);
}

/// Endpoints round-trip through create, get, list (oldest first), update and delete; a
/// second create with the same id is a `Conflict`; an invalid update writes nothing.
pub async fn endpoint_crud_round_trip(fx: Fixture) {
    let first = add_endpoint(&fx, "acme", "order.*").await;
    fx.clock().advance(secs(1));
    let mut second = endpoint_row(&fx, "acme", "*");
    second.previous_secret = Some(SealedSecret(vec![7; 32]));
    second.rate_limit = Some(25);
    second.body_format = outboxkit_core::BodyFormat::Raw;
    second.status = EndpointStatus::Paused;
    fx.store()
        .create_endpoint(&second)
        .await
        .expect("create_endpoint");
    let acme = tenant("acme");
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, second.id)
            .await
            .expect("get_endpoint"),
        second
    );
    assert_eq!(
        fx.store()
            .list_endpoints(&acme)
            .await
            .expect("list_endpoints"),
        vec![first.clone(), second.clone()]
    );
    assert_kind(
        fx.store().create_endpoint(&first).await,
        ErrorKind::Conflict,
        "create with an existing id",
    );

    let bad = EndpointUpdate {
        description: Some("x".repeat(501)),
        ..Default::default()
    };
    assert_kind(
        fx.store().update_endpoint(&acme, first.id, &bad).await,
        ErrorKind::InvalidInput,
        "invalid update",
    );
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, first.id)
            .await
            .expect("get_endpoint"),
        first
    );

    fx.clock().advance(secs(1));
    let update = EndpointUpdate {
        filter: Some(TopicFilter::parse("invoice.paid").expect("filter")),
        status: Some(EndpointStatus::Active),
        rate_limit: Some(None),
        body_format: Some(outboxkit_core::BodyFormat::Envelope),
        ..Default::default()
    };
    let got = fx
        .store()
        .update_endpoint(&acme, second.id, &update)
        .await
        .expect("update_endpoint");
    let mut want = second.clone();
    update.apply(&mut want, now(&fx));
    assert_eq!(got, want);
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, second.id)
            .await
            .expect("get_endpoint"),
        want
    );
    assert_eq!(
        enqueue(&fx, msg("invoice.paid").tenant("acme"))
            .await
            .deliveries,
        1
    );

    fx.store()
        .delete_endpoint(&acme, first.id)
        .await
        .expect("delete_endpoint");
    assert_kind(
        fx.store().get_endpoint(&acme, first.id).await,
        ErrorKind::NotFound,
        "get deleted",
    );
    assert_kind(
        fx.store().delete_endpoint(&acme, first.id).await,
        ErrorKind::NotFound,
        "delete twice",
    );
    assert_eq!(
        fx.store()
            .list_endpoints(&acme)
            .await
            .expect("list_endpoints"),
        vec![want]
    );
}

/// Consumers are upserted by name and listed by name; a deleted consumer keeps its
/// deliveries but gets no new ones.
pub async fn consumers_upsert_and_list(fx: Fixture) {
    let b = add_consumer(&fx, "beta-consumer", "order.*").await;
    let a = add_consumer(&fx, "alpha-consumer", "*").await;
    let listed = fx.store().list_consumers().await.expect("list_consumers");
    assert_eq!(
        listed.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(
        listed[1].filter,
        TopicFilter::parse("order.*").expect("filter")
    );
    let upd = Consumer {
        name: b.clone(),
        filter: TopicFilter::parse("invoice.*").expect("filter"),
        created_at: now(&fx),
    };
    fx.store()
        .put_consumer(&upd)
        .await
        .expect("put_consumer again");
    let listed = fx.store().list_consumers().await.expect("list_consumers");
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[1].filter, upd.filter);
    assert_eq!(
        enqueue(&fx, msg("order.created")).await.deliveries,
        1,
        "the old filter no longer applies"
    );
    assert_eq!(enqueue(&fx, msg("invoice.created")).await.deliveries, 2);
    fx.store()
        .delete_consumer(&b)
        .await
        .expect("delete_consumer");
    assert_eq!(
        fx.store()
            .list_consumers()
            .await
            .expect("list_consumers")
            .len(),
        1
    );
    assert_eq!(enqueue(&fx, msg("invoice.created")).await.deliveries, 1);
    let kept = list_all(
        &fx,
        &Default::default(),
        &DeliveryFilter {
            consumer: Some(b.clone()),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(kept.len(), 1, "a deleted consumer's deliveries stay");
    let got = claim_one(&fx, &for_consumer(&b)).await;
    assert_eq!(got.delivery.id, kept[0].id);
    complete_with(
        &fx,
        &got,
        Verdict::Dead {
            reason: DeadReason::Permanent,
        },
        None,
    )
    .await;
}
