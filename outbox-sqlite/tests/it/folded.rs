//! Schema 16: a delivery that finishes at its first attempt keeps that attempt in its own row
//! (no ledger row), and reads back exactly as a ledger row would; a replay moves it to the
//! ledger first, so every run's attempts stay; a delivery that needs a second attempt keeps
//! all of them in the ledger.

use std::time::Duration;

use outboxkit_core::{
    Attempt, AttemptDetail, AttemptOutcome, AttemptRecord, Claimed, Clock, Completion, DeadReason,
    DeliveryId, DeliveryStore, ErrorClass, Ledger, MessageStore, NewMessage, OperatorStore,
    TenantId, Timestamp, Verdict,
};
use outboxkit_sqlite::SqliteStore;
use rusqlite::Connection;

use crate::common::{claim_for, consumer, one_message, open, rows_of};

fn record(started: Timestamp, outcome: AttemptOutcome, excerpt: &str) -> AttemptRecord {
    let mut detail = AttemptDetail {
        request_headers: vec![("webhook-id".into(), format!("msg_{excerpt}"))],
        remote_addr: Some("127.0.0.1:8080".into()),
        ..AttemptDetail::default()
    };
    detail.set_response_body(excerpt.as_bytes(), 1024);
    AttemptRecord {
        detail: Some(Box::new(detail)),
        started_at: started,
        finished_at: started.saturating_add(Duration::from_millis(7)),
        outcome,
        status_code: Some(207),
        excerpt: Some(excerpt.to_owned()),
    }
}

async fn complete(store: &SqliteStore, c: &Claimed, verdict: Verdict, record: &AttemptRecord) {
    let r = store
        .complete_many(&[(
            c.lease.clone(),
            Completion {
                verdict,
                attempt: Some(record.clone()),
            },
        )])
        .await
        .unwrap();
    assert!(r[0].is_ok(), "{r:?}");
}

/// The ledger rows of the file, as text.
fn ledger_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    rows_of(
        &Connection::open(path).unwrap(),
        "SELECT delivery_seq, number, probe, started_at, finished_at, outcome, status_code, \
                excerpt, run, scheduled_at, detail \
         FROM outbox_attempts ORDER BY delivery_seq, number",
    )
}

/// How many rows hold their attempt.
fn folded(path: &std::path::Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM outbox_deliveries WHERE folded_started_at IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

async fn attempts(store: &SqliteStore, id: DeliveryId) -> Vec<Attempt> {
    store.attempts(&TenantId::default(), id).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_attempt_that_finishes_stays_in_its_row_and_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("folded.db");
    let clock = outboxkit_testing::ManualClock::new();
    let store = open(&path, clock.clone()).await;
    consumer(&store, &clock, "worker", "*").await;
    let enqueued_at = clock.now();
    for _ in 0..3 {
        store
            .enqueue(NewMessage::new("order.created", serde_json::json!({})))
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(2));
    let got = store.claim(&claim_for("worker", 10)).await.unwrap();
    assert_eq!(got.len(), 3);
    let started = clock.now();
    let ok = record(started, AttemptOutcome::Succeeded, "ok");
    let failed = record(
        started,
        AttemptOutcome::Failed(ErrorClass::HandlerError),
        "no",
    );
    let dead = Verdict::Dead {
        reason: DeadReason::Permanent,
    };
    complete(&store, &got[0], Verdict::Succeeded, &ok).await;
    complete(&store, &got[1], dead, &failed).await;
    let retry_at = clock.now().saturating_add(Duration::from_secs(5));
    complete(&store, &got[2], Verdict::Retry { at: retry_at }, &failed).await;

    // The two finished rows hold their attempt; the retried one is in the ledger.
    assert_eq!(folded(&path), 2);
    assert_eq!(ledger_rows(&path).len(), 1);
    for (c, rec) in [(&got[0], &ok), (&got[1], &failed), (&got[2], &failed)] {
        let read = attempts(&store, c.delivery.id).await;
        assert_eq!(read.len(), 1, "{read:?}");
        let a = &read[0];
        assert_eq!(
            (a.delivery_id, a.number, a.probe, a.run, a.scheduled_at),
            (c.delivery.id, 1, false, 1, Some(enqueued_at)),
        );
        assert_eq!(&a.record, rec, "the whole record, detail included");
    }

    // The retried delivery's second attempt succeeds: both attempts are ledger rows.
    clock.advance(Duration::from_secs(5));
    let again = store.claim(&claim_for("worker", 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    let second = record(clock.now(), AttemptOutcome::Succeeded, "second");
    complete(&store, &again[0], Verdict::Succeeded, &second).await;
    assert_eq!(folded(&path), 2);
    let read = attempts(&store, got[2].delivery.id).await;
    let numbers: Vec<_> = read.iter().map(|a| (a.number, a.record.clone())).collect();
    assert_eq!(numbers, vec![(1, failed.clone()), (2, second)]);
    assert_eq!(ledger_rows(&path).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_moves_the_folded_attempt_to_the_ledger_unchanged() {
    let (_dir, path, clock, store) = one_message().await;
    let got = store.claim(&claim_for("worker", 10)).await.unwrap();
    let id = got[0].delivery.id;
    let failed = record(
        clock.now(),
        AttemptOutcome::Failed(ErrorClass::HandlerError),
        "no",
    );
    let dead = Verdict::Dead {
        reason: DeadReason::Permanent,
    };
    complete(&store, &got[0], dead, &failed).await;
    let before = attempts(&store, id).await;
    assert!(ledger_rows(&path).is_empty());

    // A replay of another tenant's id or of a live delivery moves nothing.
    let other = TenantId::new("other").unwrap();
    assert!(store.replay(&other, id).await.is_err());
    assert_eq!((folded(&path), ledger_rows(&path).len()), (1, 0));

    clock.advance(Duration::from_secs(60));
    store.replay(&TenantId::default(), id).await.unwrap();
    assert_eq!(folded(&path), 0, "the row no longer holds it");
    assert_eq!(ledger_rows(&path).len(), 1);
    assert_eq!(attempts(&store, id).await, before, "read back unchanged");
    assert!(
        store.replay(&TenantId::default(), id).await.is_err(),
        "a pending delivery cannot be replayed"
    );
    assert_eq!(
        ledger_rows(&path).len(),
        1,
        "a refused replay writes nothing"
    );

    // The new run finishes at its first attempt too: attempt 2 of the delivery, a ledger row.
    let second = store.claim(&claim_for("worker", 10)).await.unwrap();
    let ok = record(clock.now(), AttemptOutcome::Succeeded, "ok");
    complete(&store, &second[0], Verdict::Succeeded, &ok).await;
    let read = attempts(&store, id).await;
    let runs: Vec<_> = read.iter().map(|a| (a.number, a.run)).collect();
    assert_eq!(runs, vec![(1, 1), (2, 2)]);
    assert_eq!(read[0], before[0]);
    assert_eq!(read[1].record, ok);
    assert_eq!((folded(&path), ledger_rows(&path).len()), (0, 2));
}
