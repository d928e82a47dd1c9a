//! Unit tests of `claim.rs`: claim requests, the settle table, endpoint waits and release.

use super::*;
use crate::model::{AttemptOutcome, ErrorClass};

fn t(s: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_700_000_000_000)
        .unwrap()
        .saturating_add(Duration::from_secs(s))
}

fn lease(from: DeliveryStatus, attempts: u32) -> Lease {
    Lease {
        delivery_id: DeliveryId::parse("01900000-0000-7000-8000-000000000001").unwrap(),
        tenant: TenantId::default(),
        token: ClaimToken::from_uuid(uuid::Uuid::nil()),
        until: t(30),
        attempts,
        snoozes: 1,
        claimed_from: from,
    }
}

#[test]
fn empty_allowlists_and_bad_sizes_are_refused() {
    let e = ClaimRequest::new(10, Duration::from_secs(30))
        .validate()
        .unwrap_err();
    assert_eq!(e.field(), Some("sources"));
    assert!(ClaimRequest::new(0, Duration::from_secs(30))
        .webhooks(6)
        .validate()
        .is_err());
    assert!(ClaimRequest::new(1001, Duration::from_secs(30))
        .webhooks(6)
        .validate()
        .is_err());
    assert!(ClaimRequest::new(10, Duration::from_millis(10))
        .webhooks(6)
        .validate()
        .is_err());
    assert!(ClaimRequest::new(10, Duration::from_secs(30))
        .webhooks(0)
        .validate()
        .is_err());
    assert!(ClaimRequest::new(10, Duration::from_secs(30))
        .webhooks(6)
        .validate()
        .is_ok());
}

#[test]
fn settle_table() {
    let rec = AttemptRecord {
        detail: None,
        started_at: t(0),
        finished_at: t(1),
        outcome: AttemptOutcome::Failed(ErrorClass::Response5xx),
        status_code: Some(503),
        excerpt: None,
    };
    let p = DeliveryStatus::Pending;
    let rows = [
        (p, Verdict::Succeeded, DeliveryStatus::Succeeded, 3, 1, t(9)),
        (
            p,
            Verdict::Retry { at: t(60) },
            DeliveryStatus::Pending,
            3,
            1,
            t(60),
        ),
        (
            p,
            Verdict::Held { probe_at: t(3600) },
            DeliveryStatus::Held,
            3,
            1,
            t(3600),
        ),
        (
            p,
            Verdict::Dead {
                reason: DeadReason::Gone,
            },
            DeliveryStatus::Dead,
            3,
            1,
            t(9),
        ),
        (
            p,
            Verdict::Dead {
                reason: DeadReason::EndpointRemoved,
            },
            DeliveryStatus::Dead,
            2,
            1,
            t(9),
        ),
        (
            p,
            Verdict::Snoozed { until: t(30) },
            DeliveryStatus::Pending,
            2,
            2,
            t(30),
        ),
        (
            p,
            Verdict::Parked { until: t(60) },
            DeliveryStatus::Pending,
            2,
            1,
            t(60),
        ),
        (
            p,
            Verdict::AwaitEndpoint { until: t(600) },
            DeliveryStatus::Held,
            2,
            1,
            t(600),
        ),
        // A probe spent nothing, so nothing is refunded.
        (
            DeliveryStatus::Held,
            Verdict::Held { probe_at: t(3600) },
            DeliveryStatus::Held,
            3,
            1,
            t(3600),
        ),
        (
            DeliveryStatus::Held,
            Verdict::AwaitEndpoint {
                until: Timestamp::MAX,
            },
            DeliveryStatus::Held,
            3,
            1,
            Timestamp::MAX,
        ),
        (
            DeliveryStatus::Held,
            Verdict::Retry { at: t(60) },
            DeliveryStatus::Pending,
            3,
            1,
            t(60),
        ),
        (
            DeliveryStatus::Held,
            Verdict::Parked { until: t(60) },
            DeliveryStatus::Pending,
            3,
            1,
            t(60),
        ),
    ];
    for (from, v, status, attempts, snoozes, next) in rows {
        let u = lease(from, 3).settle(&v, Some(&rec), t(9));
        assert_eq!(
            (u.status, u.attempts, u.snoozes, u.next_attempt_at),
            (status, attempts, snoozes, next),
            "{v:?} from {from:?}"
        );
        assert_eq!(u.completed_at.is_some(), status.is_finished());
        assert_eq!(
            u.disable_endpoint,
            v == Verdict::Dead {
                reason: DeadReason::Gone
            }
        );
        assert_eq!(
            u.last_outcome.as_ref().map(|l| l.status_code),
            Some(Some(503))
        );
    }
}

#[test]
fn a_wait_for_an_endpoint_that_is_back_is_pending_now() {
    let mut u = lease(DeliveryStatus::Pending, 3).settle(
        &Verdict::AwaitEndpoint {
            until: Timestamp::MAX,
        },
        None,
        t(9),
    );
    assert!(u.awaits_endpoint);
    u.endpoint_is_back(t(9));
    assert_eq!(
        (u.status, u.attempts, u.next_attempt_at, u.awaits_endpoint),
        (DeliveryStatus::Pending, 2, t(9), false)
    );
    let mut other =
        lease(DeliveryStatus::Pending, 3).settle(&Verdict::Retry { at: t(60) }, None, t(9));
    assert!(!other.awaits_endpoint);
    other.endpoint_is_back(t(9));
    assert_eq!(other.next_attempt_at, t(60), "only a wait is changed");
}

#[test]
fn release_restores_and_refunds() {
    let rows = [
        (DeliveryStatus::Pending, DeliveryStatus::Pending, 2),
        (DeliveryStatus::Processing, DeliveryStatus::Pending, 2),
        (DeliveryStatus::Held, DeliveryStatus::Held, 3),
        (DeliveryStatus::Sending, DeliveryStatus::Sending, 2),
    ];
    for (from, to, attempts) in rows {
        let u = lease(from, 3).release(Duration::from_secs(5), t(0));
        assert_eq!(
            (u.status, u.attempts, u.next_attempt_at),
            (to, attempts, t(5)),
            "{from:?}"
        );
    }
    assert_eq!(
        lease(DeliveryStatus::Pending, 0)
            .release(Duration::ZERO, t(0))
            .attempts,
        0
    );
}
