//! In-process handlers: retries, timeouts, snooze and the breaker, discard, dedup, follow-ups.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxkit_core::{DeadReason, DeliveryStatus, ErrorKind, Message, NewMessage, RetryPolicy};
use outboxkit_dispatch::{Context, Dedup, HandlerOptions, HandlerResult};

use outboxkit_core::Clock;

use crate::{world, BUDGET};

fn options(retry: RetryPolicy) -> HandlerOptions {
    HandlerOptions {
        retry,
        ..HandlerOptions::default()
    }
}

#[tokio::test]
async fn handlers_retry_then_succeed_and_fan_out_per_consumer() {
    let w = world();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let d = w
        .builder()
        .handler_with(
            "flaky",
            "order.*",
            move |ctx: Context, _m: Message| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    if ctx.attempt() < 3 {
                        HandlerResult::retry("not yet")
                    } else {
                        HandlerResult::Ok
                    }
                }
            },
            options(
                RetryPolicy::schedule(vec![Duration::from_secs(10)])
                    .unwrap()
                    .with_max_attempts(5)
                    .unwrap(),
            ),
        )
        .handler("audit", "*", |_c: Context, _m: Message| async {
            HandlerResult::Ok
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    let r = w
        .store
        .enqueue(NewMessage::new("order.created", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(r.deliveries, 2, "one delivery per consumer");
    let r1 = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r1.succeeded, r1.retried), (1, 1));
    w.advance(Duration::from_secs(10));
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    w.advance(Duration::from_secs(10));
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(w.count(DeliveryStatus::Succeeded).await, 2);
}

#[tokio::test]
async fn a_handler_past_its_timeout_is_cancelled_and_retried() {
    let w = world();
    let cancelled = Arc::new(AtomicU32::new(0));
    let c = cancelled.clone();
    let d = w
        .builder()
        .handler_with(
            "slow",
            "*",
            move |ctx: Context, _m: Message| {
                let c = c.clone();
                async move {
                    ctx.cancellation().cancelled().await;
                    c.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok
                }
            },
            HandlerOptions {
                timeout: Duration::from_secs(5),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({})))
        .await
        .unwrap();
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await.unwrap() }
    });
    // Let the handler start, then move time past its timeout.
    while w.count(DeliveryStatus::Processing).await == 0 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    w.advance(Duration::from_secs(6));
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.retried, 1);
    let del = w.one().await;
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(
        ledger[0].record.outcome,
        outboxkit_core::AttemptOutcome::Failed(outboxkit_core::ErrorClass::Timeout)
    );
}

#[tokio::test]
async fn a_snooze_refunds_and_trips_the_breaker() {
    let w = world();
    let d = w
        .builder()
        .handler_with(
            "mailer",
            "*",
            |_c: Context, _m: Message| async {
                HandlerResult::snooze(Duration::from_secs(300), "provider outage")
            },
            HandlerOptions {
                concurrency: Some(1),
                ..HandlerOptions::default()
            },
        )
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(5).await;
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!((r.claimed, r.snoozed, r.released), (5, 1, 4), "{r}");
    for del in w.deliveries().await {
        assert_eq!(del.status, DeliveryStatus::Pending);
        assert_eq!(del.attempts, 0, "snooze and release both refund");
        assert!(
            del.next_attempt_at > w.clock.now(),
            "nothing is due while the breaker is open"
        );
    }
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
}

#[tokio::test]
async fn discard_is_dead_at_once() {
    let w = world();
    let d = w
        .builder()
        .handler("strict", "*", |_c: Context, _m: Message| async {
            HandlerResult::discard("bad data")
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.dead, 1);
    assert_eq!(r.dead_ids.len(), 1);
    assert_eq!(w.one().await.dead_reason, Some(DeadReason::Permanent));
}

#[tokio::test]
async fn dedup_skips_a_key_that_succeeded_recently() {
    let w = world();
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    let dedup = Dedup::new(
        |m: &Message| {
            m.json()
                .ok()
                .and_then(|v| v["k"].as_str().map(str::to_owned))
        },
        Duration::from_secs(600),
        100,
    );
    let d = w
        .builder()
        .handler_with(
            "once",
            "*",
            move |_c: Context, _m: Message| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok
                }
            },
            HandlerOptions {
                dedup: Some(dedup),
                concurrency: Some(1),
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
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"k": "x"})))
        .await
        .unwrap();
    w.store
        .enqueue(NewMessage::new("a.b", serde_json::json!({"k": "y"})))
        .await
        .unwrap();
    let r = d.run_once(BUDGET).await.unwrap();
    assert_eq!(r.succeeded, 3);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the second `x` was skipped"
    );
}

#[tokio::test]
async fn follow_ups_carry_their_cause_and_deep_chains_are_refused() {
    let w = world();
    let refused = Arc::new(Mutex::new(None));
    let r2 = refused.clone();
    let d = w
        .builder()
        .handler("chain", "chain.step", move |ctx: Context, m: Message| {
            let r2 = r2.clone();
            async move {
                match ctx
                    .emit(NewMessage::new("chain.step", serde_json::json!({})))
                    .await
                {
                    Ok(_) => HandlerResult::Ok,
                    Err(e) => {
                        *r2.lock().unwrap() = Some((e.kind(), e.field(), m.cause.map(|c| c.depth)));
                        HandlerResult::Ok
                    }
                }
            }
        })
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.store
        .enqueue(NewMessage::new("chain.step", serde_json::json!({})))
        .await
        .unwrap();
    for _ in 0..10 {
        d.run_once(BUDGET).await.unwrap();
    }
    // The original plus five follow-ups (depths 1..=5); the sixth emit is refused.
    let all = w.deliveries().await;
    assert_eq!(all.len(), 6);
    assert_eq!(
        *refused.lock().unwrap(),
        Some((ErrorKind::InvalidInput, Some("cause"), Some(5)))
    );
    let deepest = all.iter().map(|d| d.message_id).collect::<Vec<_>>();
    let mut depths = Vec::new();
    for id in deepest {
        let m = w.store.get_message(&w.tenant, id).await.unwrap();
        depths.push(m.cause.map_or(0, |c| c.depth));
    }
    depths.sort();
    assert_eq!(depths, vec![0, 1, 2, 3, 4, 5]);
}
