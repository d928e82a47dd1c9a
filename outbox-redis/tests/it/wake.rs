//! Wake-ups across processes (pub/sub), including after the subscription is lost.

use std::collections::HashSet;
use std::time::Duration;

use outboxkit_core::{DeliveryStore, MessageStore, NewMessage};
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, admin, isolated, store};

const PATIENCE: Duration = Duration::from_secs(10);

/// Ids of the server's pub/sub clients subscribed to exactly one channel.
async fn pubsub_clients() -> HashSet<i64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin().await)
        .await
        .expect("client list");
    list.lines()
        .filter(|l| l.split(' ').any(|f| f == "sub=1"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .filter_map(|id| id.parse().ok())
        .collect()
}

/// An enqueue through another store (its own connection) wakes this store's listener: the
/// signal travels through Redis pub/sub. After the subscription's connection is killed the
/// listener reconnects, wakes once, and hears the next enqueue again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_elsewhere_wakes_listener_and_survives_reconnect() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let listening = store(&prefix, clock.clone()).await;
        let writer = store(&prefix, clock.clone()).await;
        add_worker(&writer, clock.as_ref()).await;

        let before = pubsub_clients().await;
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

        // Kill the listener's connection: the one pub/sub client that appeared since.
        let mine: Vec<i64> = pubsub_clients()
            .await
            .difference(&before)
            .copied()
            .collect();
        assert_eq!(mine.len(), 1, "one new subscriber: {mine:?}");
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(mine[0])
            .query_async(&mut admin().await)
            .await
            .expect("client kill");
        assert_eq!(killed, 1);
        tokio::time::timeout(PATIENCE, l.woken())
            .await
            .expect("one wake-up after reconnecting");

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
