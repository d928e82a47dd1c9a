//! Wake-ups across processes (pub/sub), including after the subscription is lost.

use std::time::Duration;

use outboxkit_core::{DeliveryStore, MessageStore, NewMessage};
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, admin, isolated, store};

const PATIENCE: Duration = Duration::from_secs(10);

/// The ids of the server's connections named `name` (`CLIENT SETNAME`), each with whether
/// it is subscribed (`flags` holds `P`).
async fn clients_named(name: &str) -> Vec<(i64, bool)> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin().await)
        .await
        .expect("client list");
    let field = |line: &str, key: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix(key))
            .map(str::to_owned)
    };
    list.lines()
        .filter(|l| field(l, "name=").as_deref() == Some(name))
        .filter_map(|l| {
            let id = field(l, "id=")?.parse().ok()?;
            Some((id, field(l, "flags=")?.contains('P')))
        })
        .collect()
}

/// The id of the one subscribed connection named `name`, looked for every 20 ms up to
/// 500 times.
async fn listener_connection(name: &str) -> i64 {
    let mut found = Vec::new();
    for _ in 0..500 {
        found = clients_named(name).await;
        if let [(id, true)] = found[..] {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no single subscribed connection named {name}: {found:?}");
}

/// An enqueue through another store (its own connection) wakes this store's listener: the
/// signal travels through Redis pub/sub. The listener's connection is named
/// `outbox-wake:<prefix>`; after it is killed (`CLIENT KILL ID`, this test's connection
/// only) the listener reconnects under the same name, wakes once for the window it missed,
/// and hears the next enqueue again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_elsewhere_wakes_listener_and_survives_reconnect() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let listening = store(&prefix, clock.clone()).await;
        let writer = store(&prefix, clock.clone()).await;
        add_worker(&writer, clock.as_ref()).await;
        let name = format!("outbox-wake:{prefix}");

        let mut l = listening
            .wake_listener()
            .expect("redis has a wake listener");
        // The first wake-up comes once the subscription is live.
        tokio::time::timeout(PATIENCE, l.woken())
            .await
            .expect("subscribed");

        writer
            .enqueue(NewMessage::new("job.run", serde_json::json!(1)))
            .await
            .expect("enqueue");
        tokio::time::timeout(PATIENCE, l.woken())
            .await
            .expect("woken by another store's enqueue");

        let first = listener_connection(&name).await;
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(first)
            .query_async(&mut admin().await)
            .await
            .expect("client kill");
        assert_eq!(killed, 1);
        tokio::time::timeout(PATIENCE, l.woken())
            .await
            .expect("one wake-up after reconnecting");
        let second = listener_connection(&name).await;
        assert_ne!(first, second, "the listener is on a new connection");

        writer
            .enqueue(NewMessage::new("job.run", serde_json::json!(2)))
            .await
            .expect("enqueue");
        tokio::time::timeout(PATIENCE, l.woken())
            .await
            .expect("woken again after the reconnect");
    })
    .await;
}
