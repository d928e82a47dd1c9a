//! An outbox written in the first layout (one due set per source: `q:h:<consumer>`, `q:w`,
//! `q:e`) is upgraded in place when a store opens it: nothing is lost, everything is claimable.

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryStore, MessageStore, NewMessage};
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, admin, claim_request, isolated, keys, store};

/// Rewrite the group layout under `prefix` into the first layout, as an earlier version
/// left it: every group's rows in their source's due set, no group index.
async fn downgrade(prefix: &str) {
    let mut conn = admin().await;
    for key in keys(prefix).await {
        let suffix = &key[prefix.len()..];
        if suffix.starts_with(":G:") {
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("del");
            let _: i64 = redis::cmd("SREM")
                .arg(format!("{prefix}:qs"))
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("srem");
        } else if let Some(group) = suffix.strip_prefix(":g:") {
            // `<len>:handler<len>:<tenant><consumer>` → `q:h:<consumer>`
            let (n, rest) = group.split_once(':').expect("kind");
            let n: usize = n.parse().expect("len");
            assert_eq!(&rest[..n], "handler", "this test writes handler rows only");
            let (n2, rest) = rest[n..].split_once(':').expect("tenant");
            let consumer = &rest[n2.parse::<usize>().expect("len")..];
            let q = format!("{prefix}:q:h:{consumer}");
            let rows: Vec<(String, String)> = redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .expect("zrange");
            for (m, score) in rows {
                let _: i64 = redis::cmd("ZADD")
                    .arg(&q)
                    .arg(score)
                    .arg(m)
                    .query_async(&mut conn)
                    .await
                    .expect("zadd");
            }
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .expect("del");
            let _: i64 = redis::cmd("SADD")
                .arg(format!("{prefix}:qs"))
                .arg(&q)
                .query_async(&mut conn)
                .await
                .expect("sadd");
        }
    }
}

#[tokio::test]
async fn a_first_layout_outbox_is_upgraded_in_place() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let old = store(&prefix, clock.clone()).await;
        add_worker(&old, clock.as_ref()).await;
        let mut ids = Vec::new();
        for i in 0..25 {
            let m = NewMessage::new("job.run", serde_json::json!({ "n": i }));
            ids.push(old.enqueue(m).await.expect("enqueue").message_id);
        }
        drop(old);
        downgrade(&prefix).await;
        assert!(
            keys(&prefix)
                .await
                .iter()
                .any(|k| k.ends_with(":q:h:worker")),
            "the first layout is in place"
        );

        let new = store(&prefix, clock.clone()).await;
        assert!(
            !keys(&prefix).await.iter().any(|k| k.contains(":q:")),
            "no first-layout due set is left"
        );
        let got = new.claim(&claim_request(100)).await.expect("claim");
        let claimed: Vec<_> = got.iter().map(|c| c.message.id).collect();
        assert_eq!(claimed, ids, "every message, in enqueue order");
        assert_eq!(new.stats().await.expect("stats").processing, 25);
    })
    .await;
}
