//! The attempt in full (DESIGN §18): what an attempt sent and got back comes out of the
//! ledger exactly as it was completed, one per attempt, and leaves with its delivery.

use std::time::Duration;

use outboxkit_core::model::RESPONSE_BODY_CAP_MAX;
use outboxkit_core::{
    AttemptDetail, AttemptRecord, AttemptTiming, Claimed, Completion, DeadReason, DeliveryFilter,
    DeliveryId, ErrorKind, HandlerOutcome, Outcome, TenantId, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A detail with request headers, a response and timings; `n` makes each one distinct.
fn detail(n: u8) -> AttemptDetail {
    let mut d = AttemptDetail {
        request_headers: vec![
            ("content-type".into(), "application/json".into()),
            ("webhook-id".into(), format!("msg_{n}")),
            ("webhook-signature".into(), format!("v1,sig{n}=")),
        ],
        response_headers: vec![("content-type".into(), "text/plain".into())],
        timing: AttemptTiming {
            connect: Some(Duration::from_micros(1_000 + u64::from(n))),
            first_byte: Some(Duration::from_micros(5_000)),
            total: Duration::from_micros(6_000 + u64::from(n)),
        },
        remote_addr: Some("127.0.0.1:8080".into()),
        ..AttemptDetail::default()
    };
    d.set_response_body(format!("answer {n}").as_bytes(), 1024);
    d
}

/// Details that a careless store would change: binary bodies, hostile and unicode header
/// values, an empty body, a cut body, a reused connection, no address, the largest body.
fn hostile_details() -> Vec<AttemptDetail> {
    let mut binary = detail(1);
    binary.set_response_body(b"\x00\xff\xfe{\"ok\":\x80}\r\n\x1b[31m", 1024);
    let mut hostile = detail(2);
    hostile.request_headers.push((
        "x-evil".into(),
        "<script>alert('x')</script> \"quoted\" \\ back".into(),
    ));
    hostile.response_headers = vec![
        ("x-unicode".into(), "é 😀 \u{202e}rtl ü".into()),
        ("set-cookie".into(), "a=\"b\"; Path=/; '".into()),
        ("x-empty".into(), String::new()),
        ("x-json".into(), "{\"a\":[1,2],\"b\":null}".into()),
    ];
    hostile.set_response_body("<html><script>x()</script>é😀</html>".as_bytes(), 1024);
    let mut empty = detail(3);
    empty.response_body.clear();
    empty.response_headers.clear();
    let mut cut = detail(4);
    cut.set_response_body(&[b'z'; 100], 10);
    assert!(cut.response_body_truncated);
    let mut reused = detail(5);
    reused.timing = AttemptTiming {
        connect: None,
        first_byte: None,
        total: Duration::from_micros(7),
    };
    reused.remote_addr = None;
    let mut largest = detail(6);
    let body: Vec<u8> = (0..=255u8)
        .cycle()
        .take(RESPONSE_BODY_CAP_MAX + 10)
        .collect();
    largest.set_response_body(&body, RESPONSE_BODY_CAP_MAX);
    largest.remote_addr = Some("[::1]:443".into());
    vec![binary, hostile, empty, cut, reused, largest]
}

/// The ledger record of an HTTP `status` answer, now, carrying `detail`.
fn with_detail(fx: &Fixture, status: u16, detail: Option<AttemptDetail>) -> AttemptRecord {
    let t = now(fx);
    let excerpt = format!("answered {status}");
    let mut rec = record(&http(status), t, t, Some(&excerpt)).expect("an http record");
    rec.detail = detail.map(Box::new);
    rec
}

/// Complete `got` with `verdict` and `rec`.
async fn complete_recording(fx: &Fixture, got: &Claimed, verdict: Verdict, rec: &AttemptRecord) {
    fx.store()
        .complete(
            &got.lease,
            &Completion {
                verdict,
                attempt: Some(rec.clone()),
            },
        )
        .await
        .expect("complete");
}

/// A retry due in a second.
fn retry_soon(fx: &Fixture) -> Verdict {
    Verdict::Retry {
        at: now(fx).saturating_add(secs(1)),
    }
}

/// The details a delivery's ledger returns, oldest first.
async fn details_of(fx: &Fixture, t: &TenantId, id: DeliveryId) -> Vec<Option<AttemptDetail>> {
    let attempts = fx.store().attempts(t, id).await.expect("attempts");
    attempts
        .into_iter()
        .map(|a| a.record.detail.map(|d| *d))
        .collect()
}

/// An attempt's detail comes back from `attempts` equal byte for byte: binary and empty
/// bodies, a cut body's flag, hostile and unicode header values, timings with and without
/// connect, the address, the largest body the cap allows; also on the final attempt.
pub async fn attempt_detail_round_trips_byte_for_byte(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = TenantId::default();
    let details = hostile_details();
    let mut id = None;
    for (i, d) in details.iter().enumerate() {
        fx.clock().advance(secs(2));
        let got = claim_one(&fx, &for_webhooks()).await;
        id = Some(got.delivery.id);
        let last = i + 1 == details.len();
        let (status, verdict) = if last {
            (200, Verdict::Succeeded)
        } else {
            (503, retry_soon(&fx))
        };
        let rec = with_detail(&fx, status, Some(d.clone()));
        complete_recording(&fx, &got, verdict, &rec).await;
    }
    let id = id.expect("a delivery");
    let got = details_of(&fx, &t, id).await;
    let want: Vec<_> = details.into_iter().map(Some).collect();
    assert_eq!(got, want, "the ledger returns each detail as completed");
    let last = got.last().cloned().flatten().expect("the final detail");
    assert_eq!(last.response_body.len(), RESPONSE_BODY_CAP_MAX);
    assert!(last.response_body_truncated);
}

/// An attempt completed without a detail (a handler's, or one recorded before details
/// were kept) reads back `None`, also between attempts that have one.
pub async fn attempt_without_detail_reads_none(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    enqueue(&fx, msg("order.created")).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    complete_with(
        &fx,
        &got,
        Verdict::Succeeded,
        Some(Outcome::Handler(HandlerOutcome::Ok)),
    )
    .await;
    let t = got.delivery.tenant.clone();
    assert_eq!(details_of(&fx, &t, got.delivery.id).await, vec![None]);

    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("user.created")).await;
    let mut id = None;
    let plan = [Some(detail(1)), None, Some(detail(3)), None];
    for (i, d) in plan.iter().enumerate() {
        fx.clock().advance(secs(2));
        let got = claim_one(&fx, &for_webhooks()).await;
        id = Some(got.delivery.id);
        let verdict = if i + 1 == plan.len() {
            Verdict::Dead {
                reason: DeadReason::Permanent,
            }
        } else {
            retry_soon(&fx)
        };
        let rec = with_detail(&fx, 500, d.clone());
        complete_recording(&fx, &got, verdict, &rec).await;
    }
    let got = details_of(&fx, &t, id.expect("a delivery")).await;
    assert_eq!(got, plan.to_vec(), "None stays None in its place");
}

/// A retried delivery keeps one detail per attempt, in order: the failed ones and the
/// final success, whether completed one by one or in a batch (`complete_many`).
pub async fn retried_delivery_keeps_a_detail_per_attempt(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    enqueue(&fx, msg("order.paid")).await;
    let t = TenantId::default();
    let got = claim(&fx, &for_webhooks()).await;
    assert_eq!(got.len(), 2);
    let failed: Vec<_> = (0..2u8)
        .map(|i| with_detail(&fx, 503, Some(detail(10 + i))))
        .collect();
    let items: Vec<_> = got
        .iter()
        .zip(&failed)
        .map(|(g, rec)| {
            (
                g.lease.clone(),
                Completion {
                    verdict: retry_soon(&fx),
                    attempt: Some(rec.clone()),
                },
            )
        })
        .collect();
    let results = fx
        .store()
        .complete_many(&items)
        .await
        .expect("complete_many");
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    fx.clock().advance(secs(2));
    let again = claim(&fx, &for_webhooks()).await;
    assert_eq!(again.len(), 2);
    let first = again
        .iter()
        .find(|g| g.delivery.id == got[0].delivery.id)
        .expect("the first delivery again");
    let second = again
        .iter()
        .find(|g| g.delivery.id == got[1].delivery.id)
        .expect("the second delivery again");
    let ok_one = with_detail(&fx, 200, Some(detail(20)));
    complete_recording(&fx, first, Verdict::Succeeded, &ok_one).await;
    let ok_two = with_detail(&fx, 204, Some(detail(21)));
    let results = fx
        .store()
        .complete_many(&[(
            second.lease.clone(),
            Completion {
                verdict: Verdict::Succeeded,
                attempt: Some(ok_two.clone()),
            },
        )])
        .await
        .expect("complete_many");
    assert!(results.iter().all(Result::is_ok), "{results:?}");

    // The text filter still reads every attempt's excerpt beside its detail.
    let text = DeliveryFilter {
        text: Some("answered 503".to_owned()),
        ..Default::default()
    };
    assert_eq!(
        list_all(&fx, &t, &text).await.len(),
        2,
        "the failed attempts' excerpts"
    );

    let one = fx
        .store()
        .attempts(&t, got[0].delivery.id)
        .await
        .expect("attempts");
    let records: Vec<_> = one.iter().map(|a| a.record.clone()).collect();
    assert_eq!(records, vec![failed[0].clone(), ok_one]);
    let two = fx
        .store()
        .attempts(&t, got[1].delivery.id)
        .await
        .expect("attempts");
    let records: Vec<_> = two.iter().map(|a| a.record.clone()).collect();
    assert_eq!(records, vec![failed[1].clone(), ok_two]);
}

/// A replay keeps the earlier runs' attempts with their details; the new run's attempt
/// keeps its own.
pub async fn replay_keeps_earlier_attempt_details(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = TenantId::default();
    let got = claim_one(&fx, &for_webhooks()).await;
    let id = got.delivery.id;
    let dead = with_detail(&fx, 400, Some(detail(30)));
    let verdict = Verdict::Dead {
        reason: DeadReason::Permanent,
    };
    complete_recording(&fx, &got, verdict, &dead).await;
    fx.clock().advance(secs(60));
    fx.store().replay(&t, id).await.expect("replay");
    assert_eq!(details_of(&fx, &t, id).await, vec![Some(detail(30))]);

    let second = claim_one(&fx, &for_webhooks()).await;
    let ok = with_detail(&fx, 200, Some(detail(31)));
    complete_recording(&fx, &second, Verdict::Succeeded, &ok).await;
    let attempts = fx.store().attempts(&t, id).await.expect("attempts");
    let runs: Vec<_> = attempts
        .iter()
        .map(|a| (a.run, a.record.detail.as_deref().cloned()))
        .collect();
    assert_eq!(
        runs,
        vec![(1, Some(detail(30))), (2, Some(detail(31)))],
        "each run's attempt keeps its detail"
    );
}

/// A held delivery's probe records its detail like any attempt, marked as a probe.
pub async fn held_probe_keeps_its_detail(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = TenantId::default();
    let got = claim_one(&fx, &for_webhooks()).await;
    let probe_at = now(&fx).saturating_add(secs(3600));
    let held = with_detail(&fx, 401, Some(detail(40)));
    complete_recording(&fx, &got, Verdict::Held { probe_at }, &held).await;
    fx.clock().advance(secs(3600));
    let probe = claim_one(&fx, &for_webhooks()).await;
    assert!(probe.lease.is_probe());
    let ok = with_detail(&fx, 200, Some(detail(41)));
    complete_recording(&fx, &probe, Verdict::Succeeded, &ok).await;
    let attempts = fx
        .store()
        .attempts(&t, got.delivery.id)
        .await
        .expect("attempts");
    let seen: Vec<_> = attempts
        .iter()
        .map(|a| (a.probe, a.record.detail.as_deref().cloned()))
        .collect();
    assert_eq!(
        seen,
        vec![(false, Some(detail(40))), (true, Some(detail(41)))]
    );
}

/// Retention removes the details with their delivery: after `purge_completed` and after
/// `purge_tenant` nothing of the attempts is left to read (`attempts` is `NotFound`), and
/// a delivery that is kept keeps its details.
pub async fn purge_removes_attempt_details(fx: Fixture) {
    for name in ["t-a", "t-b"] {
        add_endpoint(&fx, name, "*").await;
        for _ in 0..2 {
            enqueue(&fx, msg("order.created").tenant(name)).await;
        }
    }
    let mut finished = Vec::new();
    for (i, got) in claim(&fx, &for_webhooks()).await.iter().enumerate() {
        let n = u8::try_from(50 + i).expect("a small number");
        let rec = with_detail(&fx, 200, Some(detail(n)));
        complete_recording(&fx, got, Verdict::Succeeded, &rec).await;
        finished.push((got.delivery.tenant.clone(), got.delivery.id, n));
    }
    assert_eq!(finished.len(), 4);
    fx.clock().advance(secs(60));
    let cutoff = now(&fx);
    // One more for t-a, finished after the cutoff: it stays, with its detail.
    enqueue(&fx, msg("order.created").tenant("t-a")).await;
    let late = claim_one(&fx, &for_webhooks()).await;
    let rec = with_detail(&fx, 200, Some(detail(60)));
    complete_recording(&fx, &late, Verdict::Succeeded, &rec).await;

    let a = tenant("t-a");
    let b = tenant("t-b");
    let r = fx
        .store()
        .purge_tenant(&b, cutoff, 100)
        .await
        .expect("purge_tenant");
    assert_eq!(r.deliveries, 2);
    let mut rotation = 0;
    while fx
        .store()
        .purge_completed(cutoff, 100)
        .await
        .expect("purge_completed")
        .tenant
        .is_some()
    {
        rotation += 1;
        assert!(rotation < 10, "the purge rotation ends");
    }
    for (t, id, _) in &finished {
        assert_kind(
            fx.store().attempts(t, *id).await,
            ErrorKind::NotFound,
            "a purged delivery's attempts",
        );
    }
    assert_eq!(
        details_of(&fx, &a, late.delivery.id).await,
        vec![Some(detail(60))],
        "a kept delivery keeps its detail"
    );
}
