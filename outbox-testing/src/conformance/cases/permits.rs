//! Rate-limit permits (`DeliveryStore::take_permits`): at most `rate` grants per endpoint in
//! any second, each freed a second after it was granted, shared by every handle.

use std::time::Duration;

use outboxkit_core::endpoint::MAX_RATE_LIMIT;
use outboxkit_core::{EndpointId, ErrorKind, OsEntropy, Permits, Timestamp};

use super::helpers::*;
use crate::conformance::Fixture;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn an_endpoint(fx: &Fixture) -> EndpointId {
    EndpointId::generate(now(fx), &OsEntropy)
}

fn permits(granted: u32, next_at: Timestamp) -> Permits {
    Permits { granted, next_at }
}

/// A burst of up to the rate is granted at once; beyond it nothing, with the time the
/// oldest grant frees.
pub async fn permits_up_to_the_rate_then_wait(fx: Fixture) {
    let s = fx.store();
    let t = tenant("acme");
    let e = an_endpoint(&fx);
    let t0 = now(&fx);
    let got = s.take_permits(&t, e, 5, 3, t0).await.unwrap();
    assert_eq!(got, permits(3, t0), "some are still free");
    let got = s
        .take_permits(&t, e, 5, 4, t0.saturating_add(ms(100)))
        .await
        .unwrap();
    assert_eq!(
        got,
        permits(2, t0.saturating_add(ms(1000))),
        "two left; the oldest frees at 1 s"
    );
    let got = s
        .take_permits(&t, e, 5, 1, t0.saturating_add(ms(200)))
        .await
        .unwrap();
    assert_eq!(
        got,
        permits(0, t0.saturating_add(ms(1000))),
        "none left until the first frees"
    );
    let got = s
        .take_permits(&t, e, 5, 0, t0.saturating_add(ms(300)))
        .await
        .unwrap();
    assert_eq!(
        got,
        permits(0, t0.saturating_add(ms(1000))),
        "asking for none only reads"
    );
}

/// Each grant frees one second after it was granted (a sliding window, not a fixed one).
pub async fn permits_free_a_second_after_each_grant(fx: Fixture) {
    let s = fx.store();
    let t = tenant("acme");
    let e = an_endpoint(&fx);
    let t0 = now(&fx);
    assert_eq!(s.take_permits(&t, e, 2, 1, t0).await.unwrap().granted, 1);
    let second = s
        .take_permits(&t, e, 2, 1, t0.saturating_add(ms(400)))
        .await
        .unwrap();
    assert_eq!(second, permits(1, t0.saturating_add(ms(1000))));
    let early = s
        .take_permits(&t, e, 2, 1, t0.saturating_add(ms(999)))
        .await
        .unwrap();
    assert_eq!(early, permits(0, t0.saturating_add(ms(1000))));
    let first_back = s
        .take_permits(&t, e, 2, 2, t0.saturating_add(ms(1000)))
        .await
        .unwrap();
    assert_eq!(
        first_back,
        permits(1, t0.saturating_add(ms(1400))),
        "only the first is back"
    );
    let early = s
        .take_permits(&t, e, 2, 1, t0.saturating_add(ms(1399)))
        .await
        .unwrap();
    assert_eq!(early, permits(0, t0.saturating_add(ms(1400))));
    let late = s
        .take_permits(&t, e, 2, 5, t0.saturating_add(ms(5000)))
        .await
        .unwrap();
    assert_eq!(
        late,
        permits(2, t0.saturating_add(ms(6000))),
        "long after, the whole rate again"
    );
}

/// Two handles (their own connections where the backend has them) share one limit, and
/// concurrent calls never grant more than the rate between them.
pub async fn permits_are_shared_by_handles_on_one_backend(fx: Fixture) {
    let a = fx.store().clone();
    let b = fx.second_handle().await;
    let t = tenant("acme");
    let e = an_endpoint(&fx);
    let t0 = now(&fx);
    assert_eq!(a.take_permits(&t, e, 4, 3, t0).await.unwrap().granted, 3);
    let got = b.take_permits(&t, e, 4, 3, t0).await.unwrap();
    assert_eq!(
        got,
        permits(1, t0.saturating_add(ms(1000))),
        "the other handle sees the grants"
    );

    let e = an_endpoint(&fx);
    let calls = (0..12).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let t = t.clone();
        tokio::spawn(async move { store.take_permits(&t, e, 5, 1, t0).await })
    });
    let mut granted = 0;
    for call in calls.collect::<Vec<_>>() {
        granted += call.await.expect("the task").expect("take_permits").granted;
    }
    assert_eq!(
        granted, 5,
        "twelve concurrent asks of one share the rate of five"
    );
}

/// Permits are counted per endpoint and tenant: one endpoint at its limit leaves another,
/// and the same endpoint id under another tenant, untouched.
pub async fn permits_are_per_endpoint_and_tenant(fx: Fixture) {
    let s = fx.store();
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let e1 = an_endpoint(&fx);
    let e2 = an_endpoint(&fx);
    let t0 = now(&fx);
    assert_eq!(
        s.take_permits(&acme, e1, 2, 2, t0).await.unwrap().granted,
        2
    );
    assert_eq!(
        s.take_permits(&acme, e1, 2, 1, t0).await.unwrap().granted,
        0
    );
    assert_eq!(
        s.take_permits(&acme, e2, 2, 2, t0).await.unwrap().granted,
        2
    );
    assert_eq!(
        s.take_permits(&globex, e1, 2, 2, t0).await.unwrap().granted,
        2
    );
}

/// A rate outside 1 to `MAX_RATE_LIMIT` is refused and grants nothing; the largest rate
/// works.
pub async fn permits_refuse_a_bad_rate(fx: Fixture) {
    let s = fx.store();
    let t = tenant("acme");
    let e = an_endpoint(&fx);
    let t0 = now(&fx);
    for bad in [0, MAX_RATE_LIMIT + 1] {
        let err = s.take_permits(&t, e, bad, 1, t0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "rate {bad}");
    }
    assert_eq!(s.take_permits(&t, e, 1, 1, t0).await.unwrap().granted, 1);
    let big = s
        .take_permits(&t, e, MAX_RATE_LIMIT, MAX_RATE_LIMIT, t0)
        .await
        .unwrap();
    assert_eq!(
        big,
        permits(MAX_RATE_LIMIT - 1, t0.saturating_add(ms(1000)))
    );
}
