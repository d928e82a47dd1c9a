//! Handler dedup keys: held across retries until the final outcome, never stuck after an
//! abort at shutdown.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::DeliveryStoreExt;
use outboxkit_core::{
    ClaimRequest, Completion, ConsumerName, DeliveryStatus, Message, NewMessage, RetryPolicy,
    Verdict,
};
use outboxkit_dispatch::{Context, Dedup, HandlerOptions, HandlerResult};

use outboxkit_core::Clock;

use crate::{spawn_run, world, BUDGET};

fn by_k() -> Dedup {
    Dedup::by(|m: &Message| {
        m.json()
            .ok()
            .and_then(|v| v["k"].as_str().map(str::to_owned))
    })
}

#[tokio::test]
async fn a_dedup_key_is_held_across_retries_until_the_final_outcome() {
    let w = world();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let d = w
        .builder()
        .handler_with(
            "once",
            "*",
            move |ctx: Context, m: Message| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    let first = m.json().unwrap()["first"].as_bool().unwrap_or(false);
                    if first && ctx.attempt() == 1 {
                        HandlerResult::retry("downstream hiccup")
                    } else {
                        HandlerResult::Ok
                    }
                }
            },
            HandlerOptions {
                dedup: Some(by_k()),
                concurrency: Some(1),
                retry: RetryPolicy::schedule(vec![Duration::from_secs(10)]).unwrap(),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    let first = w
        .store
        .enqueue(NewMessage::new(
            "a.b",
            serde_json::json!({"k": "x", "first": true}),
        ))
        .await
        .unwrap();
    let second = w
        .store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"k": "x"})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.retried, r.released, r.succeeded), (1, 1, 0), "{r}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the key stays reserved while the first delivery waits for its retry"
    );
    let by_message = |id| {
        let w = &w;
        async move {
            w.deliveries()
                .await
                .into_iter()
                .find(|d| d.message_id == id)
                .unwrap()
        }
    };
    let held_back = by_message(second.message_id).await;
    assert_eq!(
        (held_back.status, held_back.attempts),
        (DeliveryStatus::Pending, 0),
        "released without spending an attempt"
    );
    assert!(held_back.next_attempt_at >= w.clock.now().saturating_add(Duration::from_secs(10)));

    // The retry succeeds; the second delivery, due with it, is then skipped.
    w.advance(Duration::from_secs(10));
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 2, "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        by_message(first.message_id).await.status,
        DeliveryStatus::Succeeded
    );
    let skipped = by_message(second.message_id).await;
    let ledger = w.store.attempts(&w.tenant, skipped.id).await.unwrap();
    assert!(ledger[0]
        .record
        .excerpt
        .as_deref()
        .is_some_and(|e| e.starts_with("skipped")));
}

#[tokio::test]
async fn a_dead_end_frees_the_key_for_the_next_delivery() {
    let w = world();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let d = w
        .builder()
        .handler_with(
            "once",
            "*",
            move |_ctx: Context, m: Message| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    if m.json().unwrap()["bad"].as_bool().unwrap_or(false) {
                        HandlerResult::discard("bad data")
                    } else {
                        HandlerResult::Ok
                    }
                }
            },
            HandlerOptions {
                dedup: Some(by_k()),
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    for body in [
        serde_json::json!({"k": "x", "bad": true}),
        serde_json::json!({"k": "x"}),
    ] {
        w.store.enqueue(NewMessage::new("a.b", body)).await.unwrap();
    }
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.dead, r.succeeded), (1, 1), "{r}");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the second one ran");
}

#[tokio::test]
async fn a_shutdown_abort_does_not_leave_the_key_reserved() {
    let w = world();
    let hang = Arc::new(AtomicBool::new(true));
    let started = Arc::new(tokio::sync::Notify::new());
    let (h, s) = (hang.clone(), started.clone());
    let d = w
        .builder()
        .config(outboxkit_dispatch::DispatcherConfig {
            poll_interval: Duration::from_millis(50),
            shutdown_grace: Duration::from_secs(1),
            ..outboxkit_dispatch::DispatcherConfig::default()
        })
        .handler_with(
            "once",
            "*",
            move |_ctx: Context, _m: Message| {
                let (h, s) = (h.clone(), s.clone());
                async move {
                    if h.load(Ordering::SeqCst) {
                        s.notify_one();
                        // Ignores every cancellation: only the abort ends it.
                        std::future::pending::<()>().await;
                    }
                    HandlerResult::Ok
                }
            },
            HandlerOptions {
                dedup: Some(by_k()),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"k": "x"})))
        .await
        .unwrap();
    let (tx, run) = spawn_run(&d);
    started.notified().await;
    tx.send(()).unwrap();
    while !run.is_finished() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.advance(Duration::from_millis(500));
    }
    let r = run.await.unwrap();
    assert_eq!(r.released, 1, "aborted and released: {r}");

    // Another worker finishes the aborted delivery; this dispatcher never sees it again.
    let claimed = w
        .store
        .claim(
            &ClaimRequest::new(10, Duration::from_secs(30))
                .handler(ConsumerName::new("once").unwrap(), 8),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    w.store
        .complete(
            &claimed[0].lease,
            &Completion {
                verdict: Verdict::Succeeded,
                attempt: None,
            },
        )
        .await
        .unwrap();
    // A new delivery with the same key waits at most one lease, then runs.
    hang.store(false, Ordering::SeqCst);
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"k": "x"})))
        .await
        .unwrap();
    w.advance(Duration::from_secs(41));
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 1, "{r}");
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 2);
}
