//! Unit tests of `retry.rs`: schedules, jitter, bad configuration, tenant overrides and a property test.

use super::*;
use proptest::prelude::*;

fn m(n: u64) -> Duration {
    Duration::from_secs(60 * n)
}

#[test]
fn webhook_schedule_walks_then_dies() {
    let p = RetryPolicy::webhook_default();
    let got: Vec<_> = (1..=6).map(|a| p.delay(a, 0.7)).collect();
    assert_eq!(
        got,
        vec![
            Some(m(1)),
            Some(m(5)),
            Some(m(30)),
            Some(m(120)),
            Some(m(720)),
            None
        ]
    );
    assert_eq!(p.max_attempts(), 6);
    let total: Duration = (1..6).filter_map(|a| p.base_delay(a)).sum();
    assert_eq!(total, m(876)); // 14.6 h
}

#[test]
fn exponential_doubles_to_the_cap() {
    let p = RetryPolicy::handler_default().with_jitter(Jitter::None);
    let got: Vec<_> = (1..=8).map(|a| p.delay(a, 0.0)).collect();
    assert_eq!(
        got,
        vec![
            Some(m(1)),
            Some(m(2)),
            Some(m(4)),
            Some(m(8)),
            Some(m(16)),
            Some(m(32)),
            Some(m(60)),
            None
        ]
    );
}

#[test]
fn jitter_table() {
    let p = RetryPolicy::exponential(m(10), 1.0, m(10), 3).unwrap();
    let cases = [
        (Jitter::None, 0.0, m(10)),
        (Jitter::None, 0.99, m(10)),
        (Jitter::Equal, 0.0, m(5)),
        (Jitter::Equal, 0.5, Duration::from_secs(450)),
        (Jitter::Full, 0.0, Duration::from_millis(1)),
        (Jitter::Full, 0.5, m(5)),
        (Jitter::Full, 7.0, m(10)),
        (Jitter::Full, f64::NAN, Duration::from_millis(1)),
    ];
    for (j, s, want) in cases {
        assert_eq!(
            p.clone().with_jitter(j).delay(1, s),
            Some(want),
            "{j:?} {s}"
        );
    }
}

#[test]
fn bad_configuration_is_an_error_not_a_panic() {
    assert!(RetryPolicy::schedule(vec![]).is_err());
    assert!(RetryPolicy::schedule(vec![Duration::ZERO]).is_err());
    assert!(RetryPolicy::schedule(vec![Duration::from_secs(31 * 86_400)]).is_err());
    assert!(RetryPolicy::exponential(Duration::ZERO, 2.0, m(1), 3).is_err());
    assert!(RetryPolicy::exponential(m(1), 0.5, m(1), 3).is_err());
    assert!(RetryPolicy::exponential(m(1), f64::NAN, m(1), 3).is_err());
    assert!(RetryPolicy::exponential(m(2), 2.0, m(1), 3).is_err());
    assert!(RetryPolicy::exponential(m(1), 2.0, m(2), 0).is_err());
    let e = RetryPolicy::handler_default()
        .with_max_attempts(5000)
        .unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Misconfigured);
}

#[test]
fn steps_and_caps_below_one_millisecond_are_refused() {
    let us = Duration::from_micros;
    let rows: [(&str, Result<RetryPolicy>, bool); 8] = [
        (
            "schedule 500 µs",
            RetryPolicy::schedule(vec![us(500)]),
            false,
        ),
        (
            "schedule 999 µs",
            RetryPolicy::schedule(vec![m(1), us(999)]),
            false,
        ),
        ("schedule 1 ms", RetryPolicy::schedule(vec![us(1000)]), true),
        (
            "base 1 ns",
            RetryPolicy::exponential(Duration::from_nanos(1), 2.0, m(1), 3),
            false,
        ),
        (
            "base 1 ms",
            RetryPolicy::exponential(us(1000), 2.0, m(1), 3),
            true,
        ),
        (
            "cap 1 ns",
            RetryPolicy::webhook_default().with_cap(Duration::from_nanos(1)),
            false,
        ),
        (
            "cap 999 µs",
            RetryPolicy::handler_default().with_cap(us(999)),
            false,
        ),
        (
            "cap 1 ms",
            RetryPolicy::handler_default().with_cap(us(1000)),
            true,
        ),
    ];
    for (name, r, ok) in rows {
        match r {
            Ok(p) => {
                assert!(ok, "{name} was accepted");
                assert!(p.delay(1, 0.0) >= Some(us(1000)), "{name}");
            }
            Err(e) => {
                assert!(!ok, "{name} was refused: {e}");
                assert_eq!(e.kind(), crate::ErrorKind::Misconfigured, "{name}");
                assert!(e.field().is_some_and(|f| f.starts_with("retry.")), "{name}");
            }
        }
    }
    // A per-tenant override below the minimum is ignored, not applied.
    let o = PolicyOverride {
        max_attempts: None,
        cap: Some(Duration::from_nanos(1)),
    };
    assert!(RetryPolicy::webhook_default().with_override(&o).is_err());
}

#[test]
fn jitter_never_goes_below_one_millisecond() {
    let ms = Duration::from_millis;
    let one = RetryPolicy::schedule(vec![ms(1)]).unwrap();
    let three = RetryPolicy::schedule(vec![ms(3)]).unwrap();
    let rows = [
        (&one, Jitter::Equal, 0.0, ms(1)),
        (&one, Jitter::Equal, 0.99, ms(1)),
        (&one, Jitter::Full, 0.0, ms(1)),
        (&one, Jitter::Full, 0.4, ms(1)),
        (&one, Jitter::None, 0.0, ms(1)),
        (&three, Jitter::Full, 0.0, ms(1)),
        (&three, Jitter::Full, 0.5, ms(1)),
        (&three, Jitter::Equal, 0.0, ms(1)),
        (&three, Jitter::Equal, 0.99, ms(2)),
    ];
    for (p, j, s, want) in rows {
        assert_eq!(
            p.clone().with_jitter(j).delay(1, s),
            Some(want),
            "{j:?} {s}"
        );
    }
}

#[test]
fn tenant_overrides_apply() {
    let mut table = HashMap::new();
    let t = TenantId::new("small").unwrap();
    table.insert(
        t.clone(),
        PolicyOverride {
            max_attempts: Some(2),
            cap: Some(m(3)),
        },
    );
    let tp = TenantPolicy::with_overrides(RetryPolicy::webhook_default(), Arc::new(table));
    let p = tp.for_tenant(&t);
    assert_eq!(p.max_attempts(), 2);
    assert_eq!(p.delay(1, 0.0), Some(m(1)));
    assert_eq!(p.delay(2, 0.0), None);
    assert_eq!(tp.for_tenant(&TenantId::default()).max_attempts(), 6);
    let capped = RetryPolicy::webhook_default().with_cap(m(3)).unwrap();
    assert_eq!(capped.delay(5, 0.0), Some(m(3)));
    let longer = RetryPolicy::webhook_default().with_max_attempts(8).unwrap();
    assert_eq!(
        longer.delay(7, 0.0),
        Some(m(720)),
        "a longer budget repeats the last step"
    );
}

fn policies() -> impl Strategy<Value = RetryPolicy> {
    let jitter = prop_oneof![Just(Jitter::None), Just(Jitter::Equal), Just(Jitter::Full)];
    let exp = (
        1u64..100_000,
        1.0f64..10.0,
        1u64..10_000_000,
        1u32..=1000,
        jitter.clone(),
    )
        .prop_map(|(base, factor, extra, max, j)| {
            RetryPolicy::exponential(
                Duration::from_millis(base),
                factor,
                Duration::from_millis(base + extra),
                max,
            )
            .unwrap()
            .with_jitter(j)
        });
    let sched = (
        proptest::collection::vec(1u64..2_000_000_000, 1..20),
        jitter,
    )
        .prop_map(|(s, j)| {
            RetryPolicy::schedule(s.into_iter().map(Duration::from_millis).collect())
                .unwrap()
                .with_jitter(j)
        });
    prop_oneof![exp, sched]
}

proptest! {
    #[test]
    fn delays_never_exceed_the_cap(p in policies(), attempt in 0u32..=u32::MAX, s in 0.0f64..1.0) {
        if let Some(d) = p.delay(attempt, s) {
            prop_assert!(d <= p.max_delay());
        }
    }

    #[test]
    fn equal_jitter_stays_in_half_to_full(p in policies(), attempt in 1u32..2000, s in 0.0f64..1.0) {
        let p = p.with_jitter(Jitter::Equal);
        if let (Some(d), Some(base)) = (p.delay(attempt, s), p.base_delay(attempt)) {
            prop_assert!(d <= base);
            prop_assert!(d.as_millis() * 2 + 1 >= base.as_millis());
        }
    }

    #[test]
    fn delays_are_at_least_one_millisecond(p in policies(), attempt in 0u32..2000, s in proptest::num::f64::ANY) {
        if let Some(d) = p.delay(attempt, s) {
            prop_assert!(d >= MIN_STEP);
        }
    }

    #[test]
    fn the_budget_always_ends_in_dead(p in policies()) {
        prop_assert!(p.delay(p.max_attempts(), 0.5).is_none());
        prop_assert!(p.delay(u32::MAX, 0.5).is_none());
        if p.max_attempts() > 1 {
            prop_assert!(p.delay(p.max_attempts() - 1, 0.5).is_some());
        }
    }

    #[test]
    fn huge_attempt_numbers_do_not_overflow(attempt in 0u32..=u32::MAX, max in 1u32..=1000) {
        let p = RetryPolicy::exponential(Duration::from_secs(1), 100.0, Duration::from_secs(3600), max).unwrap();
        let _ = p.delay(attempt, 0.3);
        let _ = RetryPolicy::webhook_default().delay(attempt, 0.3);
    }

    #[test]
    fn schedules_end_after_their_last_step(steps in proptest::collection::vec(1u64..1_000_000, 1..30)) {
        let p = RetryPolicy::schedule(steps.iter().copied().map(Duration::from_millis).collect()).unwrap();
        for (i, s) in steps.iter().enumerate() {
            prop_assert_eq!(p.delay(i as u32 + 1, 0.9), Some(Duration::from_millis(*s)));
        }
        prop_assert_eq!(p.delay(steps.len() as u32 + 1, 0.9), None);
    }
}
