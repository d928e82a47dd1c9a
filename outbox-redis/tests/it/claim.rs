//! Claim exclusivity across several connections and many concurrent claimers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use outboxkit_core::OperatorStore;
use outboxkit_core::{DeliveryId, DeliveryStore, MessageStore, NewMessage};
use outboxkit_testing::ManualClock;
use tokio::task::JoinSet;

use crate::common::{add_worker, claim_request, isolated, store, succeeded};

const DELIVERIES: usize = 5_000;
const STORES: usize = 4;
const CLAIMERS_PER_STORE: usize = 4;

/// 5,000 deliveries, 4 stores (4 connections) × 4 claimers: each delivery is handed out
/// exactly once (leases never expire: the manual clock stands still), and none is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_are_exclusive_across_connections() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let first = store(&prefix, clock.clone()).await;
        add_worker(&first, clock.as_ref()).await;
        for chunk in (0..DELIVERIES).collect::<Vec<_>>().chunks(500) {
            let batch = chunk
                .iter()
                .map(|i| NewMessage::new("job.run", serde_json::json!({ "n": i })))
                .collect();
            first.enqueue_batch(batch).await.expect("enqueue batch");
        }

        let seen: Arc<Mutex<HashMap<DeliveryId, u32>>> = Arc::default();
        let mut tasks = JoinSet::new();
        for _ in 0..STORES {
            let s = store(&prefix, clock.clone()).await;
            for _ in 0..CLAIMERS_PER_STORE {
                let (s, seen) = (s.clone(), seen.clone());
                tasks.spawn(async move {
                    loop {
                        let got = s.claim(&claim_request(25)).await.expect("claim");
                        if got.is_empty() {
                            return;
                        }
                        {
                            let mut seen = seen.lock().expect("lock");
                            for c in &got {
                                *seen.entry(c.delivery.id).or_default() += 1;
                            }
                        }
                        let items: Vec<_> =
                            got.into_iter().map(|c| (c.lease, succeeded())).collect();
                        for r in s.complete_many(&items).await.expect("complete many") {
                            r.expect("a live lease completes");
                        }
                    }
                });
            }
        }
        while let Some(r) = tasks.join_next().await {
            r.expect("a claimer task");
        }

        {
            let seen = seen.lock().expect("lock");
            assert_eq!(seen.len(), DELIVERIES, "every delivery was claimed");
            let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
            assert!(twice.is_empty(), "handed out more than once: {twice:?}");
        }
        let stats = first.stats().await.expect("stats");
        assert_eq!(stats.succeeded, DELIVERIES as u64);
        assert_eq!(stats.total(), DELIVERIES as u64, "nothing left: {stats:?}");
        assert!(first
            .claim(&claim_request(10))
            .await
            .expect("claim")
            .is_empty());
    })
    .await;
}

/// Every exhausted candidate dies at claim time, also those behind a batch that is already
/// full: a batch of one takes the fresh row and kills the three stranded, spent ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_rows_behind_a_full_batch_die_too() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        add_worker(&s, clock.as_ref()).await;
        let one_try = |batch| {
            outboxkit_core::ClaimRequest::new(batch, std::time::Duration::from_secs(60))
                .handler(crate::common::worker(), 1)
        };
        for i in 0..3 {
            s.enqueue(NewMessage::new("job.run", serde_json::json!(i)))
                .await
                .expect("enqueue");
        }
        assert_eq!(s.claim(&one_try(10)).await.expect("claim").len(), 3);
        let fresh = s
            .enqueue(NewMessage::new("job.run", serde_json::json!("fresh")))
            .await
            .expect("enqueue");
        // The three claims are stranded (their lease ended) with their one attempt spent.
        clock.advance(std::time::Duration::from_secs(61));
        let got = s.claim(&one_try(1)).await.expect("claim");
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].message.id, fresh.message_id,
            "the fresh row is due first"
        );
        let stats = s.stats().await.expect("stats");
        assert_eq!((stats.dead, stats.processing), (3, 1), "{stats:?}");
    })
    .await;
}
