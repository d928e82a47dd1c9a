//! NATS JetStream: acknowledged publishes in per-key order, a killed relay's redeliveries
//! removed by JetStream's de-duplication, recovery from a stopped server, and one test per
//! verdict row.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream::{Config, StorageType, Stream};
use outboxkit_broker::{BrokerMessage, BrokerResponse, BrokerTransport, NatsTransport};
use outboxkit_core::{
    async_trait, AttemptOutcome, DeadReason, DeliveryStatus, DynBrokerTransport, ErrorClass,
    NewMessage,
};
use outboxkit_dispatch::{BrokerSink, DispatcherConfig};
use outboxkit_testing::conformance::backend_unavailable;

use crate::private::PrivateNats;
use crate::{assert_key_order, quick_retries, unique, world, BUDGET};

async fn shared() -> Option<NatsTransport> {
    let url =
        std::env::var("OUTBOX_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    match NatsTransport::connect(&url).await {
        Ok(t) => Some(t),
        Err(e) => backend_unavailable("NATS (JetStream)", e),
    }
}

/// A stream of this test's own on `<prefix>.>`, deleted by the caller.
async fn stream(t: &NatsTransport, prefix: &str, storage: StorageType) -> Stream {
    t.jetstream()
        .create_stream(Config {
            name: prefix.to_owned(),
            subjects: vec![format!("{prefix}.>")],
            storage,
            duplicate_window: Duration::from_secs(600),
            ..Config::default()
        })
        .await
        .unwrap()
}

async fn read_all(stream: &mut Stream) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let n = stream.info().await.unwrap().state.messages;
    let mut out = Vec::new();
    for seq in 1..=n {
        out.push(stream.get_raw_message(seq).await.unwrap());
    }
    out
}

fn body(m: &async_nats::jetstream::message::StreamMessage) -> serde_json::Value {
    serde_json::from_slice(&m.payload).unwrap()
}

fn header(m: &async_nats::jetstream::message::StreamMessage, name: &str) -> String {
    m.headers.get(name).unwrap().as_str().to_owned()
}

#[tokio::test]
async fn every_message_is_published_once_acknowledged_and_read_in_key_order() {
    let Some(t) = shared().await else { return };
    let prefix = unique("ob-order");
    let mut s = stream(&t, &prefix, StorageType::Memory).await;
    let w = world().await;
    w.enqueue("order.created", 60, 4).await;
    let d = w
        .dispatcher(Arc::new(t.clone()), &format!("{prefix}.{{topic}}"))
        .await;
    let r = w.drain(&d, 10).await;
    assert_eq!(r.succeeded, 60);
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 60);
    let got = read_all(&mut s).await;
    assert_eq!(got.len(), 60, "each message stored once");
    let ids: HashSet<String> = got.iter().map(|m| header(m, "Nats-Msg-Id")).collect();
    assert_eq!(ids.len(), 60);
    for m in &got {
        assert_eq!(m.subject.as_str(), format!("{prefix}.order.created"));
        assert_eq!(header(m, "Nats-Msg-Id"), header(m, "outbox-message-id"));
        assert_eq!(header(m, "outbox-topic"), "order.created");
        assert_eq!(header(m, "outbox-tenant"), "default");
        assert_eq!(body(m)["type"], "order.created");
    }
    assert_key_order(&got.iter().map(body).collect::<Vec<_>>());
    t.jetstream().delete_stream(&prefix).await.unwrap();
}

/// Publishes for real, then "crashes" before the acknowledgement reaches the relay for
/// every third message: the publish future never finishes.
#[derive(Debug)]
struct CrashAfterPublish {
    inner: NatsTransport,
    published: AtomicUsize,
}

#[async_trait]
impl BrokerTransport for CrashAfterPublish {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        let n = self.published.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.publish(message).await;
        if n.is_multiple_of(3) {
            std::future::pending::<()>().await;
        }
        r
    }
}

#[tokio::test]
async fn a_relay_killed_mid_publish_loses_nothing_and_jetstream_drops_the_redeliveries() {
    let Some(t) = shared().await else { return };
    let prefix = unique("ob-kill");
    let mut s = stream(&t, &prefix, StorageType::Memory).await;
    let w = world().await;
    w.enqueue("order.created", 30, 0).await;
    let crashing = Arc::new(CrashAfterPublish {
        inner: t.clone(),
        published: AtomicUsize::new(0),
    });
    let subject = format!("{prefix}.{{topic}}");
    let d1 = w.dispatcher(crashing.clone(), &subject).await;
    let relay = tokio::spawn(async move { d1.run(std::future::pending()).await });
    // Wait until every message went out and the ones whose relay survived are recorded.
    for _ in 0..400 {
        if crashing.published.load(Ordering::SeqCst) >= 30
            && w.count(DeliveryStatus::Succeeded).await >= 20
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Kill the relay: its in-flight publishes never complete, their leases stay.
    relay.abort();
    let _ = relay.await;
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 20);
    assert_eq!(w.count(DeliveryStatus::Processing).await, 10);
    assert_eq!(
        read_all(&mut s).await.len(),
        30,
        "all 30 reached the stream"
    );

    // Restart after the leases ran out: the 10 stranded deliveries go out again.
    w.clock
        .advance(DispatcherConfig::default().lease + Duration::from_secs(1));
    let d2 = w.dispatcher(Arc::new(t.clone()), &subject).await;
    let r = w.drain(&d2, 10).await;
    assert_eq!(r.succeeded, 10);
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 30, "nothing lost");
    let mut duplicates = 0;
    for d in w.deliveries().await {
        for a in w.attempts(&d).await {
            if a.record.excerpt.as_deref() == Some("acknowledged as a duplicate") {
                duplicates += 1;
            }
        }
    }
    assert_eq!(
        duplicates, 10,
        "every redelivery was recognised by JetStream"
    );
    let got = read_all(&mut s).await;
    assert_eq!(got.len(), 30, "JetStream stored no duplicate");
    let ids: HashSet<String> = got.iter().map(|m| header(m, "Nats-Msg-Id")).collect();
    assert_eq!(ids.len(), 30);
    t.jetstream().delete_stream(&prefix).await.unwrap();
}

/// Counts acknowledgements and slows publishes down so the broker can be stopped midway.
#[derive(Debug)]
struct Slow {
    inner: NatsTransport,
    acked: Arc<AtomicUsize>,
}

#[async_trait]
impl BrokerTransport for Slow {
    async fn publish(&self, message: BrokerMessage) -> BrokerResponse {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = self.inner.publish(message).await;
        if matches!(r, BrokerResponse::Acknowledged { .. }) {
            self.acked.fetch_add(1, Ordering::SeqCst);
        }
        r
    }
}

#[tokio::test]
async fn stopping_the_broker_while_publishing_recovers_without_restarting_the_relay() {
    let mut server = PrivateNats::start(true, None).await;
    let t = NatsTransport::connect(&server.url()).await.unwrap();
    let prefix = unique("ob-stop");
    let mut s = stream(&t, &prefix, StorageType::File).await;
    let w = world().await;
    w.enqueue("order.created", 80, 4).await;
    let acked = Arc::new(AtomicUsize::new(0));
    let slow = Slow {
        inner: t.clone(),
        acked: acked.clone(),
    };
    let sink = BrokerSink::new(Arc::new(slow), &format!("{prefix}.{{topic}}"))
        .unwrap()
        .timeout(Duration::from_secs(2))
        .retry(quick_retries())
        .concurrency(4);
    let d = w.dispatcher_with(sink).await;
    let stopper = tokio::spawn(async move {
        while acked.load(Ordering::SeqCst) < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server.stop().await;
        // Down for longer than a publish's deadline, so publishes fail meanwhile.
        tokio::time::sleep(Duration::from_secs(3)).await;
        server.restart().await;
        server
    });
    let r = w.drain(&d, 200).await;
    let _server = stopper.await.unwrap();
    // Publishes that found no connection were put back without spending attempts (the
    // outage is shorter than the schedule, so none could die either way).
    assert_eq!(r.dead, 0);
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 80, "nothing lost");
    let got = read_all(&mut s).await;
    let ids: HashSet<String> = got.iter().map(|m| header(m, "Nats-Msg-Id")).collect();
    assert_eq!(ids.len(), 80);
    assert_eq!(got.len(), 80);
    assert_key_order(&got.iter().map(body).collect::<Vec<_>>());
}

/// The failure class of the only delivery's last attempt.
async fn last_class(w: &crate::World) -> AttemptOutcome {
    let d = w.one().await;
    w.attempts(&d).await.last().unwrap().record.outcome
}

#[tokio::test]
async fn no_stream_for_the_subject_is_held_until_the_sink_starts_again() {
    let Some(t) = shared().await else { return };
    let prefix = unique("ob-nostream");
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let subject = format!("{prefix}.{{topic}}");
    let d = w.dispatcher(Arc::new(t.clone()), &subject).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    assert_eq!(w.one().await.status, DeliveryStatus::Held);
    assert_eq!(
        last_class(&w).await,
        AttemptOutcome::Failed(ErrorClass::BrokerNoRoute)
    );
    // The operator creates the stream and restarts the relay: the held delivery goes.
    let mut s = stream(&t, &prefix, StorageType::Memory).await;
    let d = w.dispatcher(Arc::new(t.clone()), &subject).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    assert_eq!(read_all(&mut s).await.len(), 1);
    t.jetstream().delete_stream(&prefix).await.unwrap();
}

#[tokio::test]
async fn no_responders_without_jetstream_is_retried() {
    let server = PrivateNats::start(false, None).await;
    let t = NatsTransport::connect(&server.url()).await.unwrap();
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let d = w.dispatcher(Arc::new(t), "ob.{topic}").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    assert_eq!(w.one().await.status, DeliveryStatus::Pending);
    assert_eq!(
        last_class(&w).await,
        AttemptOutcome::Failed(ErrorClass::BrokerUnavailable)
    );
}

#[tokio::test]
async fn an_unacknowledged_publish_times_out_and_is_retried() {
    let Some(t) = shared().await else { return };
    let prefix = unique("ob-silent");
    // A plain subscriber takes the publish and never answers.
    let _silent = t.client().subscribe(format!("{prefix}.>")).await.unwrap();
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let sink = BrokerSink::new(Arc::new(t.clone()), &format!("{prefix}.{{topic}}"))
        .unwrap()
        .timeout(Duration::from_millis(500))
        .retry(quick_retries());
    let d = w.dispatcher_with(sink).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    assert_eq!(w.one().await.status, DeliveryStatus::Pending);
    assert_eq!(
        last_class(&w).await,
        AttemptOutcome::Failed(ErrorClass::Timeout)
    );
}

/// A NATS outage mid-run: the sink's circuit opens like an endpoint's, the backlog waits
/// without spending attempts (with a schedule that would kill it in four tries), and all of
/// it goes out once the server is back.
#[tokio::test]
async fn a_broker_outage_opens_the_sinks_circuit_and_the_backlog_spends_no_attempts() {
    let mut server = PrivateNats::start(true, None).await;
    let t = NatsTransport::connect(&server.url()).await.unwrap();
    let prefix = unique("ob-outage");
    let mut s = stream(&t, &prefix, StorageType::File).await;
    let w = world().await;
    let sink = BrokerSink::new(Arc::new(t.clone()), &format!("{prefix}.{{topic}}"))
        .unwrap()
        .timeout(Duration::from_secs(1))
        .retry(outboxkit_core::RetryPolicy::schedule(vec![Duration::from_secs(1); 3]).unwrap())
        .concurrency(8);
    let d = w.dispatcher_with(sink).await;
    w.enqueue("order.created", 20, 4).await;
    assert_eq!(w.drain(&d, 5).await.succeeded, 20);

    server.stop().await;
    w.enqueue("order.created", 40, 4).await;
    // Twenty seconds of the schedule's time while the server is down.
    let mut released = 0;
    for _ in 0..20 {
        let r = d.run_once(BUDGET).await.unwrap();
        assert_eq!((r.dead, r.retried), (0, 0), "no attempt spent: {r:?}");
        released += r.released;
        w.clock.advance(Duration::from_secs(1));
    }
    assert!(released > 0, "publishes were tried and put back");
    assert!(
        matches!(
            d.sink_circuit(crate::SINK),
            outboxkit_dispatch::CircuitState::Open { .. }
        ),
        "{:?}",
        d.sink_circuit(crate::SINK)
    );
    assert_eq!(w.count(DeliveryStatus::Dead).await, 0);
    for del in w.deliveries().await {
        if del.status == DeliveryStatus::Pending {
            assert_eq!(
                del.attempts, 0,
                "no attempt charged while the broker is down"
            );
            assert!(w.attempts(&del).await.is_empty());
        }
    }
    assert_eq!(w.count(DeliveryStatus::Pending).await, 40);

    server.restart().await;
    // Past the longest cool-down: the next probe finds the broker and closes the circuit.
    w.clock
        .advance(DispatcherConfig::default().breaker_max_cooldown);
    let r = w.drain(&d, 60).await;
    assert_eq!(r.dead, 0);
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 60, "nothing lost");
    assert_eq!(
        d.sink_circuit(crate::SINK),
        outboxkit_dispatch::CircuitState::Closed
    );
    let got = read_all(&mut s).await;
    let ids: HashSet<String> = got.iter().map(|m| header(m, "Nats-Msg-Id")).collect();
    assert_eq!(ids.len(), 60);
}

#[tokio::test]
async fn a_lost_connection_spends_no_attempt_and_goes_out_when_the_broker_returns() {
    let mut server = PrivateNats::start(true, None).await;
    let t = NatsTransport::connect(&server.url()).await.unwrap();
    let prefix = unique("ob-lost");
    stream(&t, &prefix, StorageType::File).await;
    server.stop().await;
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let sink = BrokerSink::new(Arc::new(t.clone()), &format!("{prefix}.{{topic}}"))
        .unwrap()
        .timeout(Duration::from_secs(1))
        .retry(quick_retries());
    let d = w.dispatcher_with(sink).await;
    // Not the message's fault: put back with its attempt refunded, nothing in the ledger.
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.retried, r.released), (0, 1), "{r:?}");
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
    assert!(w.attempts(&del).await.is_empty());
    server.restart().await;
    w.clock
        .advance(DispatcherConfig::default().breaker_cooldown);
    let r = w.drain(&d, 30).await;
    assert_eq!(r.succeeded, 1);
}

#[tokio::test]
async fn a_publish_permission_violation_is_held() {
    let config = r#"
authorization {
  users = [
    { user: app, password: pw, permissions: {
        publish: { allow: ["$JS.API.>", "_INBOX.>", "ok.>"] },
        subscribe: { allow: ">" } } }
  ]
}
"#;
    let server = PrivateNats::start(true, Some(config)).await;
    let url = server.url().replace("nats://", "nats://app:pw@");
    let t = match NatsTransport::connect(&url).await {
        Ok(t) => t,
        Err(e) => panic!("{e}: {}", server.log()),
    };
    let prefix = unique("ob-denied");
    stream(&t, &prefix, StorageType::Memory).await;
    let w = world().await;
    w.enqueue("order.created", 1, 1).await;
    let sink = BrokerSink::new(Arc::new(t), &format!("{prefix}.{{topic}}"))
        .unwrap()
        .timeout(Duration::from_secs(1))
        .retry(quick_retries());
    let d = w.dispatcher_with(sink).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().held, 1);
    assert_eq!(w.one().await.status, DeliveryStatus::Held);
    assert_eq!(
        last_class(&w).await,
        AttemptOutcome::Failed(ErrorClass::BrokerDenied)
    );
}

#[tokio::test]
async fn a_message_above_the_servers_max_payload_is_dead() {
    let server = PrivateNats::start(true, Some("max_payload: 2048\n")).await;
    let t = NatsTransport::connect(&server.url()).await.unwrap();
    let prefix = unique("ob-big");
    stream(&t, &prefix, StorageType::Memory).await;
    let w = world().await;
    let big = "x".repeat(8 * 1024);
    w.store
        .enqueue(NewMessage::new(
            "order.created",
            serde_json::json!({ "pad": big }),
        ))
        .await
        .unwrap();
    let d = w
        .dispatcher(
            Arc::new(t) as Arc<DynBrokerTransport>,
            &format!("{prefix}.{{topic}}"),
        )
        .await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    let one = w.one().await;
    assert_eq!(one.status, DeliveryStatus::Dead);
    assert_eq!(one.dead_reason, Some(DeadReason::Permanent));
    assert_eq!(
        last_class(&w).await,
        AttemptOutcome::Failed(ErrorClass::BrokerRejected)
    );
}
