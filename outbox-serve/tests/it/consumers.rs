//! `/v1/consumers`: global, so only an admin token reaches them; a tenant's token gets the
//! 404 it gets for another tenant's path. Pausing holds the consumer's deliveries; resuming
//! releases them.

use outboxkit_core::{
    Clock, Consumer, ConsumerName, ConsumerStatus, DeliveryStatus, SystemClock, TopicFilter,
};

use crate::common::App;

#[tokio::test]
async fn an_admin_pauses_and_resumes_a_consumer_and_a_tenant_token_gets_not_found() {
    let app = App::sqlite().await;
    app.store
        .put_consumer(&Consumer {
            name: ConsumerName::new("billing").unwrap(),
            filter: TopicFilter::all(),
            created_at: SystemClock.now(),
            status: ConsumerStatus::Active,
        })
        .await
        .unwrap();
    let (s, v) = app.get("/v1/consumers", &app.admin).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["consumers"][0]["name"], "billing");
    assert_eq!(v["consumers"][0]["status"], "active");

    // A tenant's tokens: the same 404 as another tenant's path, and nothing changes.
    for token in [&app.writer, &app.reader] {
        let (s, v) = app.post("/v1/consumers/billing/pause", token, None).await;
        assert_eq!(s, 404, "{v}");
        assert_eq!(v["type"], "urn:outbox:problem:not-found");
        let (s, _) = app.get("/v1/consumers", token).await;
        assert_eq!(s, 404);
    }
    let (s, other) = app.get("/v1/tenants/acme/endpoints", &app.other).await;
    assert_eq!(
        (s.as_u16(), &other["type"]),
        (404, &"urn:outbox:problem:not-found".into())
    );
    let (s, v) = app
        .post("/v1/consumers/ghost/pause", &app.admin, None)
        .await;
    assert_eq!(s, 404, "an unknown consumer: {v}");
    let (s, v) = app
        .post("/v1/consumers/Bad!Name/pause", &app.admin, None)
        .await;
    assert_eq!(s, 400, "{v}");
    let (_, v) = app.get("/v1/consumers", &app.admin).await;
    assert_eq!(v["consumers"][0]["status"], "active", "nothing changed");

    let (s, v) = app
        .post("/v1/consumers/billing/pause", &app.admin, None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (&v["name"], &v["status"]),
        (&"billing".into(), &"paused".into())
    );
    app.enqueue("order.created", 1).await;
    let (_, page) = app
        .get("/v1/tenants/acme/deliveries?status=held", &app.writer)
        .await;
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(page["deliveries"][0]["attempts"], 0);

    let (s, v) = app
        .post("/v1/consumers/billing/resume", &app.admin, None)
        .await;
    assert_eq!((s.as_u16(), &v["status"]), (200, &"active".into()));
    let (_, page) = app
        .get("/v1/tenants/acme/deliveries?status=pending", &app.writer)
        .await;
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 1, "{page}");
    let held = app.store.stats().await.unwrap().count(DeliveryStatus::Held);
    assert_eq!(held, 0);
}
