//! RabbitMQ: confirmed publishes consumed in per-key order, and one test per verdict row
//! (unroutable, missing exchange, a cut connection that recovers).

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};
use outboxkit_broker::AmqpTransport;
use outboxkit_core::{AttemptOutcome, DeliveryStatus, ErrorClass};
use outboxkit_dispatch::BrokerSink;
use outboxkit_testing::conformance::backend_unavailable;

use crate::private::Proxy;
use crate::{assert_key_order, quick_retries, unique, world, BUDGET};

fn url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn shared(exchange: &str) -> Option<AmqpTransport> {
    match AmqpTransport::connect(&url(), exchange).await {
        Ok(t) => Some(t),
        Err(e) => backend_unavailable("RabbitMQ", e),
    }
}

/// A topic exchange of this test's own, and a queue bound to `binding` on it when given.
async fn topology(ch: &Channel, exchange: &str, queue: Option<(&str, &str)>) {
    ch.exchange_declare(
        exchange.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    if let Some((queue, binding)) = queue {
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_bind(
            queue.into(),
            exchange.into(),
            binding.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
}

async fn cleanup(ch: &Channel, exchange: &str, queue: Option<&str>) {
    if let Some(q) = queue {
        ch.queue_delete(q.into(), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
    ch.exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn every_message_is_confirmed_and_consumed_in_key_order() {
    let exchange = unique("ob-x");
    let queue = unique("ob-q");
    let Some(t) = shared(&exchange).await else {
        return;
    };
    let ch = t.channel().await.unwrap();
    topology(&ch, &exchange, Some((&queue, "events.#"))).await;
    let w = world().await;
    w.enqueue("order.created", 40, 4).await;
    let d = w.dispatcher(Arc::new(t), "events.{topic}").await;
    let r = w.drain(&d, 10).await;
    assert_eq!(r.succeeded, 40);
    let mut bodies = Vec::new();
    let mut ids = std::collections::HashSet::new();
    while let Some(m) = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        assert_eq!(m.delivery.routing_key.as_str(), "events.order.created");
        let id = m.delivery.properties.message_id().clone().unwrap();
        // The standard property, not only the custom header.
        assert_eq!(
            m.delivery
                .properties
                .content_type()
                .as_ref()
                .map(|c| c.as_str()),
            Some("application/json")
        );
        ids.insert(id.to_string());
        bodies.push(serde_json::from_slice::<serde_json::Value>(&m.delivery.data).unwrap());
    }
    assert_eq!(bodies.len(), 40, "each message queued once");
    assert_eq!(ids.len(), 40, "message-id carries the message id");
    assert_key_order(&bodies);
    cleanup(&ch, &exchange, Some(&queue)).await;
}

#[tokio::test]
async fn an_unroutable_message_is_held() {
    let exchange = unique("ob-x");
    let Some(t) = shared(&exchange).await else {
        return;
    };
    let ch = t.channel().await.unwrap();
    topology(&ch, &exchange, None).await;
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let d = w.dispatcher(Arc::new(t), "events.{topic}").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    let one = w.one().await;
    assert_eq!(one.status, DeliveryStatus::Held);
    let a = w.attempts(&one).await;
    assert_eq!(
        a.last().unwrap().record.outcome,
        AttemptOutcome::Failed(ErrorClass::BrokerNoRoute)
    );
    cleanup(&ch, &exchange, None).await;
}

#[tokio::test]
async fn a_missing_exchange_is_held_and_the_channel_recovers() {
    let exchange = unique("ob-missing");
    let Some(t) = shared(&exchange).await else {
        return;
    };
    let t = Arc::new(t);
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let d = w.dispatcher(t.clone(), "events.{topic}").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    let one = w.one().await;
    let a = w.attempts(&one).await;
    assert_eq!(
        a.last().unwrap().record.outcome,
        AttemptOutcome::Failed(ErrorClass::BrokerNoRoute)
    );
    // The operator declares the exchange and a queue; a restart releases the delivery, and
    // the transport opens a new channel for it.
    let queue = unique("ob-q");
    let ch = t.channel().await.unwrap();
    topology(&ch, &exchange, Some((&queue, "#"))).await;
    let d = w.dispatcher(t.clone(), "events.{topic}").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    cleanup(&ch, &exchange, Some(&queue)).await;
}

#[tokio::test]
async fn a_cut_connection_spends_no_attempt_and_recovers_without_a_restart() {
    let exchange = unique("ob-x");
    let queue = unique("ob-q");
    let Some(direct) = shared(&exchange).await else {
        return;
    };
    let ch = direct.channel().await.unwrap();
    topology(&ch, &exchange, Some((&queue, "#"))).await;
    let target = url::Url::parse(&url()).unwrap();
    let proxy = Proxy::start((
        target.host_str().unwrap().to_owned(),
        target.port().unwrap_or(5672),
    ))
    .await;
    let mut via = target.clone();
    via.set_host(Some("127.0.0.1")).unwrap();
    via.set_port(Some(proxy.port)).unwrap();
    let t = AmqpTransport::connect(via.as_str(), &exchange)
        .await
        .unwrap();
    let w = world().await;
    w.enqueue("order.created", 10, 2).await;
    let sink = BrokerSink::new(Arc::new(t), "events.{topic}")
        .unwrap()
        .timeout(Duration::from_secs(2))
        .retry(quick_retries());
    let d = w.dispatcher_with(sink).await;
    proxy.cut();
    let r = d.run_once(BUDGET).await.unwrap();
    // One per ordering key: the later ones wait behind the heads of their keys, which found
    // no connection and went back with their attempts refunded (nothing in the ledger).
    assert_eq!((r.retried, r.released), (0, 2), "{r:?}");
    for d in w.deliveries().await {
        assert_eq!(d.attempts, 0);
        assert!(w.attempts(&d).await.is_empty());
    }
    proxy.heal();
    w.clock
        .advance(outboxkit_dispatch::DispatcherConfig::default().breaker_cooldown);
    let r = w.drain(&d, 30).await;
    assert_eq!(r.succeeded, 10);
    let mut n = 0;
    while ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_some()
    {
        n += 1;
    }
    assert_eq!(n, 10);
    cleanup(&ch, &exchange, Some(&queue)).await;
}

/// `rabbitmqctl` with `args`; false when it cannot run (no local RabbitMQ control).
fn rabbitmqctl(args: &[&str]) -> bool {
    std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[tokio::test]
async fn a_refused_permission_is_held() {
    // A vhost and a user of this test's own: may configure and read, may write nowhere.
    let vhost = unique("ob-vhost");
    let user = unique("ob-user");
    let exchange = unique("ob-x");
    let ready = rabbitmqctl(&["add_vhost", &vhost])
        && rabbitmqctl(&["add_user", &user, "pw"])
        && rabbitmqctl(&["set_permissions", "-p", &vhost, &user, ".*", "^$", ".*"]);
    if !ready {
        rabbitmqctl(&["delete_user", &user]);
        rabbitmqctl(&["delete_vhost", &vhost]);
        backend_unavailable::<()>("rabbitmqctl (to create a restricted user)", "it failed");
        return;
    }
    let target = url::Url::parse(&url()).unwrap();
    let uri = format!(
        "amqp://{user}:pw@{}:{}/{vhost}",
        target.host_str().unwrap(),
        target.port().unwrap_or(5672)
    );
    let t = AmqpTransport::connect(&uri, &exchange).await.unwrap();
    let ch = t.channel().await.unwrap();
    topology(&ch, &exchange, None).await;
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let d = w.dispatcher(Arc::new(t), "events.{topic}").await;
    let held = d.run_once(BUDGET).await.unwrap().held;
    let one = w.one().await;
    let last = w.attempts(&one).await.last().unwrap().record.outcome;
    rabbitmqctl(&["delete_user", &user]);
    rabbitmqctl(&["delete_vhost", &vhost]);
    assert_eq!(held, 1);
    assert_eq!(one.status, DeliveryStatus::Held);
    assert_eq!(last, AttemptOutcome::Failed(ErrorClass::BrokerDenied));
}

/// `start` with RabbitMQ unreachable: the transport starts unconnected (publishes find no
/// connection and spend no attempt), connects in the background once the broker is
/// reachable, and the sink then publishes.
#[tokio::test]
async fn a_transport_started_while_rabbitmq_is_unreachable_connects_when_it_is_back() {
    let exchange = unique("ob-x");
    let queue = unique("ob-q");
    let Some(direct) = shared(&exchange).await else {
        return;
    };
    let ch = direct.channel().await.unwrap();
    topology(&ch, &exchange, Some((&queue, "#"))).await;
    let target = url::Url::parse(&url()).unwrap();
    let proxy = Proxy::start((
        target.host_str().unwrap().to_owned(),
        target.port().unwrap_or(5672),
    ))
    .await;
    proxy.cut();
    let mut via = target.clone();
    via.set_host(Some("127.0.0.1")).unwrap();
    via.set_port(Some(proxy.port)).unwrap();
    let started = outboxkit_broker::start(
        &outboxkit_broker::BrokerUrl::parse(via.as_str()).unwrap(),
        &exchange,
    )
    .await
    .expect("an unreachable broker does not stop the start");
    assert!(!started.is_connected());
    let w = world().await;
    w.enqueue("order.created", 3, 0).await;
    let sink = BrokerSink::new(started.transport(), "events.{topic}")
        .unwrap()
        .timeout(Duration::from_secs(2))
        .retry(quick_retries());
    let d = w.dispatcher_with(sink).await;
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.succeeded, r.retried, r.dead), (0, 0, 0), "{r:?}");
    assert_eq!(w.count(DeliveryStatus::Pending).await, 3);

    proxy.heal();
    let mut up = false;
    for _ in 0..200 {
        if started.is_connected() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "connected in the background");
    w.clock
        .advance(outboxkit_dispatch::DispatcherConfig::default().breaker_max_cooldown);
    let r = w.drain(&d, 10).await;
    assert_eq!(r.succeeded, 3);
    cleanup(&ch, &exchange, Some(&queue)).await;
}

#[tokio::test]
async fn refused_credentials_still_stop_the_start() {
    if shared("").await.is_none() {
        return;
    }
    let mut bad = url::Url::parse(&url()).unwrap();
    bad.set_username("nobody-here").unwrap();
    bad.set_password(Some("wrong")).unwrap();
    let e = outboxkit_broker::start(
        &outboxkit_broker::BrokerUrl::parse(bad.as_str()).unwrap(),
        "",
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("rabbitmq"), "{e}");
    assert!(!e.to_string().contains("wrong"), "{e}");
}
