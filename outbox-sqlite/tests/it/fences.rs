//! A completion writes the same rows whether the store that completes it claimed the row (its
//! fence kept from the claim) or not (the fence read back under the token): the attempt's
//! number, run and due time, over two runs of a claim. And a lease the same store claimed
//! again after it ran out is lost, while the new one settles.

use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, ClaimRequest, Claimed, Clock, Completion, ConsumerName,
    DeliveryStore, ErrorClass, Lease, MessageStore, NewMessage, OperatorStore, Verdict,
};
use rusqlite::Connection;

use crate::common::{claim_for, consumer, one_message, open, LEASE};

fn completion(c: &Claimed, verdict: Verdict, at: outboxkit_core::Timestamp) -> (Lease, Completion) {
    (
        c.lease.clone(),
        Completion {
            verdict,
            attempt: Some(AttemptRecord {
                detail: None,
                started_at: at,
                finished_at: at,
                outcome: AttemptOutcome::Failed(ErrorClass::Timeout),
                status_code: None,
                excerpt: Some(format!("try of {}", c.delivery.id)),
            }),
        },
    )
}

/// An attempt row: (row, number, run, scheduled_at, excerpt).
type AttemptRow = (i64, i64, i64, Option<i64>, Option<String>);

/// Every attempt, in delivery order: the ledger's rows and the attempts kept in their
/// delivery's row (schema 16: a delivery finished at its first attempt).
fn attempts(path: &std::path::Path) -> Vec<AttemptRow> {
    Connection::open(path)
        .unwrap()
        .prepare(
            "SELECT delivery_seq, number, run, scheduled_at, excerpt FROM outbox_attempts \
             UNION ALL \
             SELECT seq, attempt_count, run, due_at, last_excerpt FROM outbox_deliveries \
             WHERE folded_started_at IS NOT NULL \
             ORDER BY 1, 2",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_writes_the_same_rows_from_any_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fences.db");
    let clock = outboxkit_testing::ManualClock::new();
    let claimer = open(&path, clock.clone()).await;
    // Another handle on the file: it did not claim, so it reads each fence back.
    let other = open(&path, clock.clone()).await;
    consumer(&claimer, &clock, "worker", "*").await;
    for _ in 0..2 {
        claimer
            .enqueue(NewMessage::new("order.created", serde_json::json!({})))
            .await
            .unwrap();
    }
    let enqueued_at = clock.now().as_unix_millis();

    let mut retry_at = None;
    for round in 1..=2_i64 {
        let got = claimer.claim(&claim_for("worker", 10)).await.unwrap();
        assert_eq!(got.len(), 2, "round {round}");
        let now = clock.now();
        let at = now.saturating_add(Duration::from_secs(5));
        let verdict = Verdict::Retry { at };
        for (c, store) in got.iter().zip([&claimer, &other]) {
            let r = store
                .complete_many(&[completion(c, verdict.clone(), now)])
                .await
                .unwrap();
            assert!(r[0].is_ok(), "round {round}: {r:?}");
        }
        let rows = attempts(&path);
        let this_round: Vec<_> = rows.iter().filter(|a| a.1 == round).collect();
        assert_eq!(this_round.len(), 2, "{rows:?}");
        let due = retry_at.unwrap_or(enqueued_at);
        for a in &this_round {
            assert_eq!(
                (a.2, a.3),
                (1, Some(due)),
                "round {round}: run 1, due when claimed"
            );
        }
        retry_at = Some(at.as_unix_millis());
        clock.advance(Duration::from_secs(5));
    }
    assert_eq!(attempts(&path).len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_claimed_again_by_the_same_store_is_lost() {
    let (_dir, path, clock, store) = one_message().await;
    let first = store.claim(&claim_for("worker", 1)).await.unwrap();
    assert_eq!(first.len(), 1);
    clock.advance(LEASE + Duration::from_secs(1));
    let second = store.claim(&claim_for("worker", 1)).await.unwrap();
    assert_eq!(second.len(), 1, "the lease ran out: claimable again");
    assert_eq!(second[0].delivery.id, first[0].delivery.id);

    let now = clock.now();
    let old = store
        .complete_many(&[completion(&first[0], Verdict::Succeeded, now)])
        .await
        .unwrap();
    assert!(old[0].is_err(), "the first lease is lost: {old:?}");
    let new = store
        .complete_many(&[completion(&second[0], Verdict::Succeeded, now)])
        .await
        .unwrap();
    assert!(new[0].is_ok(), "{new:?}");
    // Only the second lease's attempt: number 1 (the first lease recorded none).
    let rows = attempts(&path);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].1, 1);
    // The same lease twice in one batch: the first settles, the second is lost.
    assert!(store
        .complete_many(&[completion(&second[0], Verdict::Succeeded, now)])
        .await
        .unwrap()[0]
        .is_err());
}

/// A row killed while its lease is out (its last attempt, stranded) loses the lease even
/// though the store still holds the fence from the claim: the settle is fenced by the token.
#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_row_died_meanwhile_is_lost() {
    let (_dir, path, clock, store) = one_message().await;
    let last_attempt = ClaimRequest::new(1, LEASE).handler(ConsumerName::new("worker").unwrap(), 1);
    let got = store.claim(&last_attempt).await.unwrap();
    assert_eq!(got.len(), 1);
    clock.advance(LEASE + Duration::from_secs(1));
    // The stranded last attempt dies in the next claim.
    assert!(store.claim(&last_attempt).await.unwrap().is_empty());
    let r = store
        .complete_many(&[completion(&got[0], Verdict::Succeeded, clock.now())])
        .await
        .unwrap();
    assert!(r[0].is_err(), "{r:?}");
    assert!(attempts(&path).is_empty());
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.dead, stats.succeeded), (1, 0));
}
