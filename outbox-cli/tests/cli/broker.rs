//! `outbox relay --broker nats://…` publishes to JetStream (the local NATS at
//! 127.0.0.1:4222, or `OUTBOX_TEST_NATS_URL`), into a stream of this test's own.

use std::time::Duration;

use outboxkit_broker::async_nats::jetstream::stream::{Config, StorageType};
use outboxkit_broker::NatsTransport;
use outboxkit_core::{EntropyExt, OsEntropy};

use crate::{outbox, sqlite_url};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_to_jetstream_with_a_topic_filter_and_subject_template() {
    let url =
        std::env::var("OUTBOX_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let nats = match NatsTransport::connect(&url).await {
        Ok(t) => t,
        Err(e) => {
            return outboxkit_testing::conformance::backend_unavailable::<()>("nats", e)
                .unwrap_or(())
        }
    };
    let stream = format!("cli-relay-{:08x}", OsEntropy.next_u64() as u32);
    nats.jetstream()
        .create_stream(Config {
            name: stream.clone(),
            subjects: vec![format!("{stream}.>")],
            storage: StorageType::Memory,
            duplicate_window: Duration::from_secs(60),
            ..Config::default()
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let s = store.as_str();
    outbox(&["migrate", "--store", s]).ok();
    let subject = format!("{stream}.{{tenant}}.{{topic}}");
    let relay = |s: &str| {
        outbox(&[
            "relay",
            "--store",
            s,
            "--until-idle",
            "--broker",
            &url,
            "--broker-topics",
            "order.*",
            "--broker-subject",
            &subject,
        ])
        .ok()
    };
    // The first run registers the sink, so later enqueues fan out to it.
    relay(s);
    for (topic, n) in [("order.created", 1), ("order.paid", 2), ("user.created", 3)] {
        outbox(&[
            "enqueue",
            "--store",
            s,
            "--topic",
            topic,
            "--data",
            &format!("{{\"n\":{n}}}"),
        ])
        .ok();
    }
    let report = relay(s);
    assert!(report.contains("succeeded 2"), "{report}");
    let mut st = nats.jetstream().get_stream(&stream).await.unwrap();
    assert_eq!(
        st.info().await.unwrap().state.messages,
        2,
        "user.* is filtered out"
    );
    // The two deliveries have no ordering key, so the relay may publish them in either
    // order: compare the subjects as a set.
    let mut subjects = Vec::new();
    for seq in 1..=2 {
        let m = st.get_raw_message(seq).await.unwrap();
        subjects.push(m.subject.to_string());
    }
    subjects.sort();
    assert_eq!(
        subjects,
        [
            format!("{stream}.default.order.created"),
            format!("{stream}.default.order.paid")
        ]
    );
    let listed = outbox(&["deliveries", "list", "--store", s]).ok();
    assert!(listed.contains("handler:broker"), "{listed}");
    nats.jetstream().delete_stream(&stream).await.unwrap();
}
