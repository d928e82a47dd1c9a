//! Files made before schema version 15 (the claim and barrier indexes keyed by the text
//! columns tenant, kind, target) upgrade in place to integer group ids: every delivery keeps
//! its status and values, carries the id of its (tenant, kind, target) group, and the claim,
//! the per-key barrier and the tenant counts read the same rows as before. Two stores opening
//! the file at once migrate it once.

use std::time::Duration;

use outboxkit_core::DeliveryStoreExt as _;
use outboxkit_core::{
    ClaimRequest, Claimed, Clock, Completion, ConsumerName, DeadReason, Delivery, DeliveryFilter,
    DeliveryStatus, DeliveryStore, Ledger, MessageStore, NewMessage, OperatorStore, PageRequest,
    TenantId, Verdict,
};
use outboxkit_sqlite::{migrations, SqliteStore, SCHEMA_VERSION};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{consumer, open, LEASE};

const TENANTS: [&str; 2] = ["default", "t2"];

fn both(batch: u32) -> ClaimRequest {
    ClaimRequest::new(batch, LEASE)
        .handler(ConsumerName::new("worker").unwrap(), 10)
        .handler(ConsumerName::new("audit").unwrap(), 10)
}

async fn complete(store: &SqliteStore, c: &Claimed, verdict: Verdict) {
    store
        .complete(
            &c.lease,
            &Completion {
                verdict,
                attempt: None,
            },
        )
        .await
        .expect("complete");
}

/// Every delivery of every tenant, oldest first.
async fn everything(store: &SqliteStore) -> Vec<Delivery> {
    let mut all = Vec::new();
    for t in TENANTS {
        let t = TenantId::new(t).unwrap();
        let mut page = store
            .list_deliveries(&t, &DeliveryFilter::default(), PageRequest::first(100))
            .await
            .unwrap()
            .items;
        page.reverse();
        all.extend(page);
    }
    all
}

async fn counts(store: &SqliteStore) -> Vec<outboxkit_core::Stats> {
    let mut out = Vec::new();
    for t in TENANTS {
        out.push(
            store
                .tenant_stats(&TenantId::new(t).unwrap(), None)
                .await
                .unwrap(),
        );
    }
    out
}

/// The schema's SQL, whitespace removed, sorted (to compare two files' schemas).
fn schema_of(conn: &Connection) -> Vec<String> {
    let mut sql: Vec<String> = conn
        .prepare("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(|s| s.unwrap().split_whitespace().collect::<String>())
        .collect();
    sql.sort();
    sql
}

/// Undo version 15 on a file: what version 14 left.
const BACK_TO_14: &str = "DROP INDEX outbox_deliveries_claim; \
     DROP INDEX outbox_deliveries_barrier; \
     ALTER TABLE outbox_deliveries DROP COLUMN grp; \
     DROP TABLE outbox_groups; \
     CREATE INDEX outbox_deliveries_claim \
         ON outbox_deliveries (tenant, kind, target, next_attempt_at, seq) \
         WHERE status NOT IN ('succeeded', 'dead'); \
     CREATE INDEX outbox_deliveries_barrier \
         ON outbox_deliveries (tenant, kind, target, barrier, seq) \
         WHERE barrier IS NOT NULL AND status NOT IN ('succeeded', 'dead'); \
     DELETE FROM outbox_schema_version WHERE version = 15;";

#[tokio::test(flavor = "multi_thread")]
async fn a_version_14_file_with_every_status_upgrades_to_group_ids() {
    const { assert!(SCHEMA_VERSION >= 15, "version 15 (group ids) is shipped") };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new();
    let later = |c: &ManualClock| c.now().saturating_add(Duration::from_secs(3600));
    let (before, before_counts) = {
        let store = open(&path, clock.clone()).await;
        consumer(&store, &clock, "worker", "*").await;
        consumer(&store, &clock, "audit", "order.*").await;
        // Per tenant: 7 messages, two deliveries each; the even ones keyed `k`.
        for t in TENANTS {
            for n in 0..7 {
                let mut m =
                    NewMessage::new("order.created", serde_json::json!({ "n": n })).tenant(t);
                if n % 2 == 0 {
                    m = m.ordering_key("k");
                }
                store.enqueue(m).await.unwrap();
                clock.advance(Duration::from_millis(1));
            }
        }
        // Four groups (2 tenants × 2 consumers), the unkeyed and each key's first delivery
        // claimable: succeeded, dead, retrying, held, snoozed, sending, processing; the rest
        // stay pending.
        let got = store.claim(&both(100)).await.expect("claim");
        assert!(got.len() >= 14, "{}", got.len());
        let verdicts = [
            Some(Verdict::Succeeded),
            Some(Verdict::Dead {
                reason: DeadReason::Permanent,
            }),
            Some(Verdict::Retry { at: later(&clock) }),
            Some(Verdict::Held {
                probe_at: later(&clock),
            }),
            Some(Verdict::Snoozed {
                until: later(&clock),
            }),
            None, // sending
            None, // processing
        ];
        for (i, c) in got.iter().enumerate() {
            match &verdicts[i % verdicts.len()] {
                Some(v) => complete(&store, c, v.clone()).await,
                None if i % verdicts.len() == 5 => store.mark_sending(&c.lease).await.unwrap(),
                None => {}
            }
        }
        let all = everything(&store).await;
        for s in [
            DeliveryStatus::Pending,
            DeliveryStatus::Held,
            DeliveryStatus::Processing,
            DeliveryStatus::Sending,
            DeliveryStatus::Succeeded,
            DeliveryStatus::Dead,
        ] {
            assert!(all.iter().any(|d| d.status == s), "a delivery {s:?}");
        }
        (all, counts(&store).await)
    };
    // Make it the file version 14 left, and check that it is.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(BACK_TO_14).unwrap();
        let fresh = Connection::open_in_memory().unwrap();
        fresh
            .execute_batch(
                "CREATE TABLE outbox_schema_version (version INTEGER NOT NULL PRIMARY KEY, \
                                                     applied_at INTEGER NOT NULL)",
            )
            .unwrap();
        for m in migrations().into_iter().filter(|m| m.version <= 14) {
            fresh.execute_batch(m.sql).unwrap();
        }
        assert_eq!(
            schema_of(&conn),
            schema_of(&fresh),
            "the file is version 14's"
        );
    }
    // Two stores open it at once: both migrate, the work is done once.
    let (a, b) = tokio::join!(open(&path, clock.clone()), open(&path, clock.clone()));
    drop(b);
    let store = a;
    {
        let conn = Connection::open(&path).unwrap();
        let recorded: i64 = conn
            .query_row(
                "SELECT count(*) FROM outbox_schema_version WHERE version = 15",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(recorded, 1);
        let groups: i64 = conn
            .query_row("SELECT count(*) FROM outbox_groups", [], |r| r.get(0))
            .unwrap();
        assert_eq!(groups, 4, "one per tenant and consumer");
        let astray: i64 = conn
            .query_row(
                "SELECT count(*) FROM outbox_deliveries AS d \
                 LEFT JOIN outbox_groups AS g ON g.id = d.grp \
                 WHERE g.id IS NULL OR g.tenant <> d.tenant OR g.kind <> d.kind \
                    OR g.target <> d.target",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(astray, 0, "every delivery carries its own group's id");
    }
    assert_eq!(everything(&store).await, before, "every delivery as it was");
    assert_eq!(counts(&store).await, before_counts, "the tenants' counts");

    // A new message joins the existing groups.
    store
        .enqueue(NewMessage::new("order.created", serde_json::json!({ "n": 7 })).tenant("t2"))
        .await
        .unwrap();
    {
        let conn = Connection::open(&path).unwrap();
        let groups: i64 = conn
            .query_row("SELECT count(*) FROM outbox_groups", [], |r| r.get(0))
            .unwrap();
        assert_eq!(groups, 4, "no new group for a known one");
    }

    // Everything left is delivered, once, and each key in order: past every lease and
    // retry, claim until nothing is due, completing as we go.
    clock.advance(Duration::from_secs(7200));
    let mut delivered = std::collections::HashSet::new();
    let mut keyed_order: std::collections::HashMap<(String, String), Vec<i64>> = Default::default();
    for _ in 0..20 {
        let got = store.claim(&both(100)).await.expect("claim");
        if got.is_empty() {
            break;
        }
        for c in &got {
            assert!(
                delivered.insert(c.delivery.id),
                "claimed twice: {}",
                c.delivery.id
            );
            if c.delivery.ordering_key.is_some() {
                let n = c.message.json().unwrap()["n"].as_i64().unwrap();
                keyed_order
                    .entry((
                        c.delivery.tenant.to_string(),
                        c.delivery.destination.target(),
                    ))
                    .or_default()
                    .push(n);
            }
            complete(&store, c, Verdict::Succeeded).await;
        }
    }
    let unfinished = everything(&store)
        .await
        .into_iter()
        .filter(|d| !matches!(d.status, DeliveryStatus::Succeeded | DeliveryStatus::Dead))
        .count();
    assert_eq!(unfinished, 0, "every delivery finished");
    for (group, ns) in keyed_order {
        let mut sorted = ns.clone();
        sorted.sort_unstable();
        assert_eq!(ns, sorted, "key `k` of {group:?} in order");
    }
}
