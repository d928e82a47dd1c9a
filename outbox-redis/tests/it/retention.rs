//! Memory stays bounded: after everything finished is purged, only a few fixed bookkeeping
//! keys remain under the prefix.

use std::time::Duration;

use outboxkit_core::{
    AttemptOutcome, AttemptRecord, Clock, Completion, DeadReason, DeliveryStore, ErrorClass,
    MessageStore, NewMessage, Verdict,
};
use outboxkit_core::{DeliveryStoreExt, LedgerExt, OperatorStore};
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, claim_request, isolated, keys, store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_leaves_only_bookkeeping_keys() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        add_worker(&s, clock.as_ref()).await;
        let mut batch = Vec::new();
        for i in 0..200 {
            let mut m = NewMessage::new("job.run", serde_json::json!({ "n": i }))
                .tenant(format!("t{}", i % 3))
                .ordering_key(format!("k{}", i % 7));
            if i % 2 == 0 {
                m = m.idempotency_key(format!("key-{i}"));
            }
            batch.push(m);
        }
        batch.push(
            NewMessage::new("matches.nothing.x", serde_json::json!(0)).email("ops@example.com"),
        );
        s.enqueue_batch(batch).await.expect("enqueue");
        let email = s
            .claim(&outboxkit_core::ClaimRequest::new(10, Duration::from_secs(60)).email(3))
            .await
            .expect("claim email");
        assert_eq!(email.len(), 1);
        s.complete(
            &email[0].lease,
            &Completion {
                verdict: Verdict::Succeeded,
                attempt: None,
            },
        )
        .await
        .expect("complete email");

        let mut n = 0;
        loop {
            let got = s.claim(&claim_request(50)).await.expect("claim");
            if got.is_empty() {
                break;
            }
            let now = clock.now();
            let items: Vec<_> = got
                .into_iter()
                .map(|c| {
                    n += 1;
                    let verdict = if n % 5 == 0 {
                        Verdict::Dead {
                            reason: DeadReason::Permanent,
                        }
                    } else {
                        Verdict::Succeeded
                    };
                    let record = AttemptRecord {
                        detail: None,
                        started_at: now,
                        finished_at: now,
                        outcome: AttemptOutcome::Failed(ErrorClass::HandlerError),
                        status_code: None,
                        excerpt: Some("boom".into()),
                    };
                    (
                        c.lease,
                        Completion {
                            verdict,
                            attempt: Some(record),
                        },
                    )
                })
                .collect();
            for r in s.complete_many(&items).await.expect("complete") {
                r.expect("completed");
            }
        }
        assert_eq!(
            n, 201,
            "200 jobs and the e-mailed message, which the worker also receives"
        );

        clock.advance(Duration::from_secs(3600));
        let cutoff = clock.now();
        let mut rounds = 0;
        loop {
            let r = s.purge_completed(cutoff, 37).await.expect("purge");
            if r.tenant.is_none() {
                break;
            }
            rounds += 1;
            assert!(rounds < 100, "purge makes progress");
        }
        let stats = s.stats().await.expect("stats");
        assert_eq!(stats.total(), 0, "{stats:?}");

        let allowed: Vec<String> = ["seq", "stats", "purge", "consumers", "qs"]
            .iter()
            .map(|k| format!("{prefix}:{k}"))
            .collect();
        let left: Vec<String> = keys(&prefix)
            .await
            .into_iter()
            .filter(|k| !allowed.contains(k))
            .collect();
        assert!(
            left.is_empty(),
            "keys left after purging everything: {left:?}"
        );
    })
    .await;
}
