//! Files made before schema version 13 (no attempt detail) upgrade in place: every delivery
//! keeps its status, its old attempts read back with no detail, and new attempts keep theirs.

use std::time::Duration;

use outboxkit_core::DeliveryStoreExt as _;
use outboxkit_core::{
    AttemptDetail, AttemptOutcome, AttemptRecord, AttemptTiming, Claimed, Clock, Completion,
    DeadReason, DeliveryFilter, DeliveryStatus, DeliveryStore, Ledger, MessageStore, NewMessage,
    PageRequest, TenantId, Timestamp, Verdict,
};
use outboxkit_sqlite::{migrations, SqliteStore, SCHEMA_VERSION};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::{claim_for, consumer, open};

fn detail(n: u8) -> AttemptDetail {
    let mut d = AttemptDetail {
        request_headers: vec![("webhook-id".into(), format!("msg_{n}"))],
        response_headers: vec![("x-hostile".into(), "<script>\"é\"</script>".into())],
        timing: AttemptTiming {
            connect: None,
            first_byte: Some(Duration::from_micros(900)),
            total: Duration::from_micros(1_000),
        },
        remote_addr: Some("127.0.0.1:9".into()),
        ..AttemptDetail::default()
    };
    d.set_response_body(&[0xff, n, 0x00], 16);
    d
}

fn record(at: Timestamp, outcome: AttemptOutcome, detail: Option<AttemptDetail>) -> AttemptRecord {
    AttemptRecord {
        started_at: at,
        finished_at: at,
        outcome,
        status_code: Some(503),
        excerpt: Some("answer".into()),
        detail: detail.map(Box::new),
    }
}

async fn complete(store: &SqliteStore, c: &Claimed, verdict: Verdict, rec: AttemptRecord) {
    store
        .complete(
            &c.lease,
            &Completion {
                verdict,
                attempt: Some(rec),
            },
        )
        .await
        .expect("complete");
}

/// Claim the one due delivery of `worker`.
async fn claim_one(store: &SqliteStore) -> Claimed {
    let mut got = store.claim(&claim_for("worker", 1)).await.expect("claim");
    assert_eq!(got.len(), 1);
    got.remove(0)
}

#[tokio::test]
async fn a_version_12_file_with_every_status_upgrades_with_attempts_without_detail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new();
    let t = TenantId::default();
    let failed = AttemptOutcome::Failed(outboxkit_core::ErrorClass::HandlerError);
    let soon = |c: &ManualClock| c.now().saturating_add(Duration::from_secs(1));
    let mut ids = Vec::new();
    {
        let store = open(&path, clock.clone()).await;
        consumer(&store, &clock, "worker", "*").await;
        for n in 0..6 {
            let m = NewMessage::new("order.created", serde_json::json!({ "n": n }));
            store.enqueue(m).await.unwrap();
            clock.advance(Duration::from_millis(1));
        }
        // Oldest first: succeeded after a retry, dead, retrying (pending with an attempt),
        // held, snoozed, processing (claimed), pending (untouched).
        let got = store.claim(&claim_for("worker", 6)).await.expect("claim");
        assert_eq!(got.len(), 6);
        ids.extend(got.iter().map(|c| c.delivery.id));
        let later = clock.now().saturating_add(Duration::from_secs(3600));
        let verdicts = [
            Verdict::Retry { at: soon(&clock) },
            Verdict::Dead {
                reason: DeadReason::Permanent,
            },
            Verdict::Retry { at: later },
            Verdict::Held { probe_at: later },
            Verdict::Snoozed { until: later },
        ];
        for (c, v) in got.iter().zip(verdicts) {
            complete(&store, c, v, record(clock.now(), failed, None)).await;
        }
        clock.advance(Duration::from_secs(2));
        let again = claim_one(&store).await;
        assert_eq!(again.delivery.id, ids[0]);
        let ok = record(clock.now(), AttemptOutcome::Succeeded, None);
        complete(&store, &again, Verdict::Succeeded, ok).await;
        let m = NewMessage::new("order.created", serde_json::json!({ "n": 6 }));
        store.enqueue(m).await.unwrap();
    }
    // Make it the file version 12 left: no detail column, no version 13 record.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE outbox_attempts DROP COLUMN detail; \
             DELETE FROM outbox_schema_version WHERE version = 13;",
        )
        .unwrap();
    }
    const {
        assert!(
            SCHEMA_VERSION >= 13,
            "version 13 (attempt detail) is shipped"
        )
    };
    let store = open(&path, clock.clone()).await;
    let mut all = store
        .list_deliveries(&t, &DeliveryFilter::default(), PageRequest::first(100))
        .await
        .unwrap()
        .items;
    all.reverse();
    let statuses: Vec<_> = all.iter().map(|d| d.status).collect();
    use DeliveryStatus::*;
    assert_eq!(
        statuses,
        vec![Succeeded, Dead, Pending, Held, Pending, Processing, Pending],
        "every delivery keeps its status"
    );
    assert_eq!(all[..6].iter().map(|d| d.id).collect::<Vec<_>>(), ids);
    let mut old = 0;
    for d in &all {
        for a in store.attempts(&t, d.id).await.expect("attempts") {
            assert_eq!(a.record.detail, None, "an attempt from before version 13");
            old += 1;
        }
    }
    assert_eq!(old, 6, "every old attempt is kept");

    // The retrying delivery's next attempt keeps its detail, after the old one's None.
    clock.advance(Duration::from_secs(3600));
    let c = store.claim(&claim_for("worker", 10)).await.expect("claim");
    let retried = c
        .iter()
        .find(|c| c.delivery.id == all[2].id)
        .expect("the retrying delivery is due");
    let rec = record(clock.now(), AttemptOutcome::Succeeded, Some(detail(1)));
    complete(&store, retried, Verdict::Succeeded, rec).await;
    let details: Vec<_> = store
        .attempts(&t, all[2].id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.record.detail.map(|d| *d))
        .collect();
    assert_eq!(details, vec![None, Some(detail(1))]);
}

/// A file at each earlier version, empty, upgrades on open to one that keeps an attempt's
/// detail.
#[tokio::test]
async fn a_file_at_every_earlier_version_upgrades_to_keep_details() {
    for version in 1..SCHEMA_VERSION {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let clock = ManualClock::new();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE outbox_schema_version (version INTEGER NOT NULL PRIMARY KEY, \
                                                     applied_at INTEGER NOT NULL)",
            )
            .unwrap();
            for m in migrations().into_iter().filter(|m| m.version <= version) {
                conn.execute_batch(m.sql).unwrap();
                conn.execute(
                    "INSERT INTO outbox_schema_version VALUES (?1, 0)",
                    [m.version],
                )
                .unwrap();
            }
        }
        let store = open(&path, clock.clone()).await;
        consumer(&store, &clock, "worker", "*").await;
        store
            .enqueue(NewMessage::new("order.created", serde_json::json!({})))
            .await
            .unwrap();
        let c = claim_one(&store).await;
        let rec = record(
            clock.now(),
            AttemptOutcome::Succeeded,
            Some(detail(version as u8)),
        );
        complete(&store, &c, Verdict::Succeeded, rec.clone()).await;
        let got = store
            .attempts(&TenantId::default(), c.delivery.id)
            .await
            .unwrap();
        assert_eq!(
            got.into_iter().map(|a| a.record).collect::<Vec<_>>(),
            vec![rec],
            "a file at version {version} keeps the detail after the upgrade"
        );
    }
}
