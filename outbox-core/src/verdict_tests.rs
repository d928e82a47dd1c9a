//! Unit tests of `verdict.rs`: the verdict table, attempts spent, Retry-After, snoozes, held probes and ledger outcomes.

use super::*;
use crate::mail::MailErrorCode as C;
use crate::mail::MailOutcome as O;

const NOW_MS: i64 = 1_700_000_000_000;

fn at(secs: u64) -> Timestamp {
    Timestamp::from_unix_millis(NOW_MS)
        .unwrap()
        .saturating_add(Duration::from_secs(secs))
}

fn ctx(attempt: u32) -> AttemptContext {
    AttemptContext {
        attempt,
        snoozes: 0,
        probe: false,
        now: at(0),
        jitter: 0.5,
    }
}

fn policy() -> VerdictPolicy {
    VerdictPolicy::new(RetryPolicy::webhook_default())
}

fn http(status: u16) -> Outcome {
    Outcome::Http {
        status,
        retry_after: None,
    }
}

fn mail(code: C, outcome: O) -> Outcome {
    Outcome::Mail(Err(MailError::new(code, outcome, "x")))
}

fn retry(secs: u64) -> Verdict {
    Verdict::Retry { at: at(secs) }
}

fn dead(reason: DeadReason) -> Verdict {
    Verdict::Dead { reason }
}

/// The verdict table, row by row. Attempt 1 of the webhook schedule: a retry waits 60 s.
#[test]
fn verdict_table() {
    let held = Verdict::Held { probe_at: at(3600) };
    let rows: Vec<(&str, Outcome, u32, Verdict)> = vec![
        (
            "handler ok",
            Outcome::Handler(HandlerOutcome::Ok),
            1,
            Verdict::Succeeded,
        ),
        ("http 200", http(200), 1, Verdict::Succeeded),
        ("http 204", http(204), 1, Verdict::Succeeded),
        (
            "mail accepted",
            Outcome::Mail(Ok(())),
            1,
            Verdict::Succeeded,
        ),
        ("http 401 held", http(401), 1, held.clone()),
        ("http 403 held", http(403), 1, held.clone()),
        ("http 410 gone", http(410), 1, dead(DeadReason::Gone)),
        ("http 301 refused, retried", http(301), 1, retry(60)),
        ("http 302 refused, retried", http(302), 2, retry(300)),
        ("http 408 retried", http(408), 1, retry(60)),
        ("http 425 retried", http(425), 1, retry(60)),
        ("http 429 retried", http(429), 1, retry(60)),
        ("http 500 retried", http(500), 1, retry(60)),
        ("http 503 retried", http(503), 3, retry(1800)),
        (
            "timeout retried",
            Outcome::Transport(ErrorClass::Timeout),
            1,
            retry(60),
        ),
        (
            "network retried",
            Outcome::Transport(ErrorClass::Network),
            1,
            retry(60),
        ),
        (
            "dns retried",
            Outcome::Transport(ErrorClass::Dns),
            4,
            retry(7200),
        ),
        (
            "egress refused retried",
            Outcome::Transport(ErrorClass::EgressRefused),
            5,
            retry(43_200),
        ),
        ("other 4xx retried", http(400), 1, retry(60)),
        ("http 404 retried", http(404), 1, retry(60)),
        ("http 422 retried", http(422), 2, retry(300)),
        (
            "handler retry",
            Outcome::Handler(HandlerOutcome::Retry),
            1,
            retry(60),
        ),
        (
            "handler timeout",
            Outcome::Handler(HandlerOutcome::Timeout),
            1,
            retry(60),
        ),
        (
            "handler snooze",
            Outcome::Handler(HandlerOutcome::Snooze(Duration::from_secs(30))),
            1,
            Verdict::Snoozed { until: at(30) },
        ),
        (
            "handler discard",
            Outcome::Handler(HandlerOutcome::Discard),
            1,
            dead(DeadReason::Permanent),
        ),
        (
            "mail message refused",
            mail(C::MessageRefused, O::NotSent),
            1,
            dead(DeadReason::MailRefused),
        ),
        (
            "mail configuration refused",
            mail(C::ConfigurationRefused, O::NotSent),
            1,
            dead(DeadReason::MailRefused),
        ),
        (
            "mail unavailable, not sent",
            mail(C::Unavailable, O::NotSent),
            1,
            retry(60),
        ),
        (
            "mail unknown, not idempotent",
            mail(C::Unavailable, O::Unknown),
            1,
            dead(DeadReason::UnknownOutcome),
        ),
        (
            "budget spent 5xx",
            http(500),
            6,
            dead(DeadReason::MaxAttempts),
        ),
        (
            "budget spent timeout",
            Outcome::Transport(ErrorClass::Timeout),
            6,
            dead(DeadReason::MaxAttempts),
        ),
        (
            "budget spent 4xx",
            http(400),
            7,
            dead(DeadReason::MaxAttempts),
        ),
        (
            "endpoint missing",
            Outcome::EndpointMissing,
            1,
            dead(DeadReason::EndpointRemoved),
        ),
        (
            "endpoint paused",
            Outcome::EndpointPaused,
            1,
            Verdict::AwaitEndpoint {
                until: Timestamp::MAX,
            },
        ),
        (
            "endpoint disabled",
            Outcome::EndpointDisabled,
            1,
            Verdict::AwaitEndpoint {
                until: at(7 * 24 * 3600),
            },
        ),
        (
            "unrenderable",
            Outcome::Unrenderable,
            1,
            dead(DeadReason::Unrenderable),
        ),
    ];
    for (name, outcome, attempt, want) in rows {
        assert_eq!(classify(&outcome, &ctx(attempt), &policy()), want, "{name}");
    }
}

#[test]
fn attempts_spent_column() {
    let rows = [
        (Verdict::Succeeded, false),
        (retry(1), false),
        (Verdict::Held { probe_at: at(1) }, false),
        (dead(DeadReason::Gone), false),
        (dead(DeadReason::Permanent), false),
        (dead(DeadReason::MaxAttempts), false),
        (dead(DeadReason::EndpointRemoved), true),
        (dead(DeadReason::EndpointDisabled), true),
        (Verdict::Snoozed { until: at(1) }, true),
        (Verdict::Parked { until: at(1) }, true),
        (Verdict::AwaitEndpoint { until: at(1) }, true),
    ];
    for (v, refund) in rows {
        assert_eq!(v.refunds_attempt(), refund, "{v:?}");
    }
}

#[test]
fn mail_unknown_is_retried_through_an_idempotent_mailer() {
    let mut p = policy();
    p.mail_idempotent = true;
    assert_eq!(
        classify(&mail(C::Unavailable, O::Unknown), &ctx(1), &p),
        retry(60)
    );
    assert_eq!(
        classify(&mail(C::MessageRefused, O::Unknown), &ctx(1), &p),
        dead(DeadReason::MailRefused)
    );
}

#[test]
fn retry_after_seconds_and_dates_are_honoured_and_clamped() {
    let ra = |v: &str, attempt| {
        classify(
            &Outcome::Http {
                status: 429,
                retry_after: Some(v.into()),
            },
            &ctx(attempt),
            &policy(),
        )
    };
    // Seconds, above the policy delay: honoured.
    assert_eq!(ra("120", 1), retry(120));
    // Below the policy delay: the policy delay wins.
    assert_eq!(ra("5", 1), retry(60));
    assert_eq!(ra("5", 2), retry(300));
    // Above 24 h: clamped to 24 h.
    assert_eq!(ra("999999", 1), retry(86_400));
    assert_eq!(ra("99999999999999999999999", 1), retry(86_400));
    // An HTTP date 10 minutes ahead.
    let date = httpdate::fmt_http_date(
        std::time::UNIX_EPOCH + Duration::from_millis(NOW_MS as u64 + 600_000),
    );
    assert_eq!(ra(&date, 1), retry(600));
    // An HTTP date in the past: the policy delay.
    assert_eq!(ra("Sun, 06 Nov 1994 08:49:37 GMT", 1), retry(60));
    // Garbage is ignored.
    assert_eq!(ra("soon", 1), retry(60));
    // On a 503 too, but never on a 400.
    let v = classify(
        &Outcome::Http {
            status: 503,
            retry_after: Some("600".into()),
        },
        &ctx(1),
        &policy(),
    );
    assert_eq!(v, retry(600));
    let v = classify(
        &Outcome::Http {
            status: 400,
            retry_after: Some("600".into()),
        },
        &ctx(1),
        &policy(),
    );
    assert_eq!(v, retry(60));
    // A spent budget is dead whatever the header says.
    assert_eq!(ra("120", 6), dead(DeadReason::MaxAttempts));
}

#[test]
fn snooze_is_capped() {
    let mut c = ctx(1);
    c.snoozes = 5;
    let v = classify(
        &Outcome::Handler(HandlerOutcome::Snooze(Duration::from_secs(30))),
        &c,
        &policy(),
    );
    assert_eq!(v, retry(60), "past max_snoozes a snooze counts as a retry");
    c.snoozes = 4;
    let v = classify(
        &Outcome::Handler(HandlerOutcome::Snooze(Duration::from_secs(200_000))),
        &c,
        &policy(),
    );
    assert_eq!(
        v,
        Verdict::Snoozed { until: at(86_400) },
        "a snooze is at most 24 h"
    );
}

/// Probes of a held delivery (attempt 3 spent): 2xx succeeds, 401/403 stays held, 410
/// kills, and a 5xx, timeout or other answer returns to the retry schedule (seed 000).
#[test]
fn held_probes_table() {
    let mut c = ctx(3);
    c.probe = true;
    let rows = [
        (http(200), Verdict::Succeeded),
        (http(401), Verdict::Held { probe_at: at(3600) }),
        (http(403), Verdict::Held { probe_at: at(3600) }),
        (http(500), retry(30 * 60)),
        (http(503), retry(30 * 60)),
        (Outcome::Transport(ErrorClass::Timeout), retry(30 * 60)),
        (Outcome::Transport(ErrorClass::Network), retry(30 * 60)),
        (http(404), retry(30 * 60)),
        (http(410), dead(DeadReason::Gone)),
        (Outcome::EndpointMissing, dead(DeadReason::EndpointRemoved)),
        (
            Outcome::EndpointDisabled,
            dead(DeadReason::EndpointDisabled),
        ),
        (
            Outcome::EndpointPaused,
            Verdict::AwaitEndpoint {
                until: Timestamp::MAX,
            },
        ),
    ];
    for (o, want) in rows {
        assert_eq!(classify(&o, &c, &policy()), want, "{o:?}");
    }
    // A probe that meets a 5xx with the budget spent is dead like any retry.
    let mut last = ctx(6);
    last.probe = true;
    assert_eq!(
        classify(&http(503), &last, &policy()),
        dead(DeadReason::MaxAttempts)
    );
    // Retry-After is honoured for a probe as for any attempt.
    let ra = Outcome::Http {
        status: 503,
        retry_after: Some("7200".into()),
    };
    assert_eq!(classify(&ra, &c, &policy()), retry(7200));
}

/// A delivery that finds its endpoint paused or disabled waits for it without spending:
/// a paused endpoint's wait has no end, a disabled one's ends after `DISABLED_HOLD`.
#[test]
fn endpoint_waits() {
    assert_eq!(
        classify(&Outcome::EndpointPaused, &ctx(2), &policy()),
        Verdict::AwaitEndpoint {
            until: Timestamp::MAX
        }
    );
    assert_eq!(
        classify(&Outcome::EndpointDisabled, &ctx(2), &policy()),
        Verdict::AwaitEndpoint {
            until: at(crate::endpoint::DISABLED_HOLD.as_secs())
        }
    );
}

#[test]
fn ledger_outcomes() {
    use AttemptOutcome::*;
    let rows = [
        (http(200), Some(Succeeded)),
        (http(302), Some(Failed(ErrorClass::Redirect))),
        (http(404), Some(Failed(ErrorClass::Response4xx))),
        (http(503), Some(Failed(ErrorClass::Response5xx))),
        (
            Outcome::Transport(ErrorClass::Dns),
            Some(Failed(ErrorClass::Dns)),
        ),
        (
            mail(C::Unavailable, O::Unknown),
            Some(Failed(ErrorClass::MailUnknown)),
        ),
        (
            mail(C::RateLimited, O::NotSent),
            Some(Failed(ErrorClass::MailNotSent)),
        ),
        (
            Outcome::Handler(HandlerOutcome::Discard),
            Some(Failed(ErrorClass::Discarded)),
        ),
        (Outcome::EndpointPaused, None),
    ];
    for (o, want) in rows {
        assert_eq!(o.attempt_outcome(), want, "{o:?}");
    }
}
