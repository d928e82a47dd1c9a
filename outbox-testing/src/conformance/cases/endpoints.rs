//! Endpoints and consumers: CRUD, tenant scoping, and the updates (secret rotation, URL
//! change) that release an endpoint's held deliveries.

use outboxkit_core::{
    Consumer, DeadReason, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointStatus,
    EndpointUpdate, EndpointUrl, ErrorKind, SealedSecret, TopicFilter, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

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
        status: outboxkit_core::ConsumerStatus::Active,
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
