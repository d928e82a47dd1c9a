//! Every verdict of the verdict table, produced by the real classification table and written
//! through the store.

use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::{
    AttemptOutcome, DeadReason, DeliveryStatus, DisabledReason, EndpointStatus, EndpointUpdate,
    ErrorClass, ErrorKind, HandlerOutcome, Outcome, Timestamp, Verdict,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A 2xx ends the delivery as `succeeded`, with the attempt in the ledger.
pub async fn verdict_succeeded(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.destination.endpoint(), Some(e.id));
    fx.clock().advance(secs(1));
    let v = settle(&fx, &got, http(204), &webhook_policy()).await;
    assert_eq!(v, Verdict::Succeeded);
    let acme = tenant("acme");
    let d = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!(d.status, DeliveryStatus::Succeeded);
    assert_eq!(d.attempts, 1);
    assert_eq!(d.completed_at, Some(now(&fx)));
    assert_eq!(d.dead_reason, None);
    let last = d.last_outcome.expect("a last outcome");
    assert_eq!(
        (last.outcome, last.status_code),
        (AttemptOutcome::Succeeded, Some(204))
    );
    let attempts = fx.store().attempts(&acme, d.id).await.expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].record.outcome, AttemptOutcome::Succeeded);
    fx.clock().advance(secs(86_400));
    claim_none(&fx, &for_webhooks()).await;
}

/// A 5xx retries after the policy's delay; `Retry-After` (seconds or an HTTP date) is
/// honoured but never shortens the policy's delay.
pub async fn verdict_retry_uses_policy_delay(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let policy = webhook_policy();

    let got = claim_one(&fx, &for_webhooks()).await;
    let v = settle(&fx, &got, http(503), &policy).await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(60))
        }
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Pending, 1));
    assert_eq!(d.next_attempt_at, now(&fx).saturating_add(secs(60)));
    assert_eq!(d.lease_until, None);
    assert_eq!(
        d.last_outcome.map(|l| l.outcome),
        Some(AttemptOutcome::Failed(ErrorClass::Response5xx))
    );
    fx.clock().advance(secs(59));
    claim_none(&fx, &for_webhooks()).await;
    fx.clock().advance(secs(1));

    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.lease.attempts, 2);
    let hinted = Outcome::Http {
        status: 429,
        retry_after: Some("600".to_owned()),
    };
    let v = settle(&fx, &got, hinted, &policy).await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(600))
        },
        "Retry-After beyond the policy delay"
    );
    assert_eq!(
        delivery(&fx, &t, got.delivery.id).await.next_attempt_at,
        now(&fx).saturating_add(secs(600))
    );
    fx.clock().advance(secs(600));

    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.lease.attempts, 3);
    let date = httpdate_after(&fx, 7200);
    let v = settle(
        &fx,
        &got,
        Outcome::Http {
            status: 503,
            retry_after: Some(date),
        },
        &policy,
    )
    .await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(7200))
        },
        "Retry-After as an HTTP date"
    );
    fx.clock().advance(secs(7200));

    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.lease.attempts, 4);
    let short = Outcome::Http {
        status: 503,
        retry_after: Some("10".to_owned()),
    };
    let v = settle(&fx, &got, short, &policy).await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(7200))
        },
        "a short Retry-After is clamped up to the policy delay"
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        (d.attempts, d.next_attempt_at),
        (4, now(&fx).saturating_add(secs(7200)))
    );
    assert_eq!(
        fx.store().attempts(&t, d.id).await.expect("attempts").len(),
        4
    );
}

fn httpdate_after(fx: &Fixture, s: u64) -> String {
    // RFC 7231 IMF-fixdate from the manual clock, built by hand (no extra dependency).
    let t = now(fx).saturating_add(secs(s)).as_unix_seconds();
    let days = t.div_euclid(86_400);
    let rem = t.rem_euclid(86_400);
    let (h, m, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    // civil from days (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(month <= 2);
    let names = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {d:02} {} {y} {h:02}:{m:02}:{sec:02} GMT",
        names[(month - 1) as usize]
    )
}

/// A 410 kills the delivery (`gone`) and disables the endpoint, so new messages wait for it.
pub async fn verdict_gone_disables_endpoint(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    let keep = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    let claimed = claim(&fx, &for_webhooks()).await;
    let gone = claimed
        .iter()
        .find(|c| c.delivery.destination.endpoint() == Some(e.id))
        .expect("the gone endpoint's delivery");
    fx.clock().advance(secs(1));
    let v = settle(&fx, gone, http(410), &webhook_policy()).await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: DeadReason::Gone
        }
    );
    let d = delivery(&fx, &acme, gone.delivery.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::Gone), 1)
    );
    assert_eq!(d.completed_at, Some(now(&fx)));
    let ep = fx
        .store()
        .get_endpoint(&acme, e.id)
        .await
        .expect("get_endpoint");
    assert_eq!(ep.status, EndpointStatus::Disabled(DisabledReason::Gone));
    assert_eq!(
        fx.store()
            .get_endpoint(&acme, keep.id)
            .await
            .expect("get_endpoint")
            .status,
        EndpointStatus::Active
    );
    let next = enqueue(&fx, msg("order.updated").tenant("acme")).await;
    assert_eq!(
        next.deliveries, 2,
        "a disabled endpoint's new delivery is written and waits"
    );
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(got.delivery.destination.endpoint(), Some(keep.id));
}

/// A failure with the budget spent is `dead` (`max_attempts`).
pub async fn verdict_dead_on_exhausted_budget(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let policy = handler_policy(2);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let v = settle(&fx, &got, Outcome::Handler(HandlerOutcome::Retry), &policy).await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(60))
        }
    );
    fx.clock().advance(secs(60));
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.lease.attempts, 2);
    let v = settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Timeout),
        &policy,
    )
    .await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: DeadReason::MaxAttempts
        }
    );
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::MaxAttempts), 2)
    );
    assert_eq!(d.completed_at, Some(now(&fx)));
    assert_eq!(
        d.last_outcome.map(|l| l.outcome),
        Some(AttemptOutcome::Failed(ErrorClass::Timeout))
    );
    fx.clock().advance(secs(86_400));
    claim_none(&fx, &for_consumer(&c)).await;
}

/// A handler's `discard` is `dead` (`permanent`) at once, the attempt spent.
pub async fn verdict_dead_permanent(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let v = settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Discard),
        &handler_policy(8),
    )
    .await;
    assert_eq!(
        v,
        Verdict::Dead {
            reason: DeadReason::Permanent
        }
    );
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(
        (d.status, d.dead_reason, d.attempts),
        (DeliveryStatus::Dead, Some(DeadReason::Permanent), 1)
    );
    let attempts = fx
        .store()
        .attempts(&Default::default(), d.id)
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0].record.outcome,
        AttemptOutcome::Failed(ErrorClass::Discarded)
    );
}

/// A snooze puts the delivery back after the snooze delay with the attempt refunded.
pub async fn snooze_refunds_attempt(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let policy = handler_policy(8);
    let got = claim_one(&fx, &for_consumer(&c)).await;
    let v = settle(
        &fx,
        &got,
        Outcome::Handler(HandlerOutcome::Snooze(secs(30))),
        &policy,
    )
    .await;
    assert_eq!(
        v,
        Verdict::Snoozed {
            until: now(&fx).saturating_add(secs(30))
        }
    );
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.snoozes),
        (DeliveryStatus::Pending, 0, 1)
    );
    assert_eq!(d.next_attempt_at, now(&fx).saturating_add(secs(30)));
    fx.clock().advance(secs(29));
    claim_none(&fx, &for_consumer(&c)).await;
    fx.clock().advance(secs(1));
    let again = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!((again.lease.attempts, again.lease.snoozes), (1, 1));
}

/// Past `max_snoozes`, a snooze counts as a retry: the attempt is spent and the delay is
/// the larger of the snooze and the policy's.
pub async fn snooze_cap_counts_as_retry(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let mut policy = handler_policy(8);
    policy.max_snoozes = 2;
    let snooze = || Outcome::Handler(HandlerOutcome::Snooze(secs(10)));
    for n in 1..=2 {
        let got = claim_one(&fx, &for_consumer(&c)).await;
        assert_eq!((got.lease.attempts, got.lease.snoozes), (1, n - 1));
        assert!(matches!(
            settle(&fx, &got, snooze(), &policy).await,
            Verdict::Snoozed { .. }
        ));
        fx.clock().advance(secs(10));
    }
    let got = claim_one(&fx, &for_consumer(&c)).await;
    assert_eq!(got.lease.snoozes, 2);
    let v = settle(&fx, &got, snooze(), &policy).await;
    assert_eq!(
        v,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(60))
        }
    );
    let d = delivery(&fx, &Default::default(), got.delivery.id).await;
    assert_eq!(
        (d.status, d.attempts, d.snoozes),
        (DeliveryStatus::Pending, 1, 2)
    );
    assert_eq!(d.next_attempt_at, now(&fx).saturating_add(secs(60)));
}

/// A delivery that finds its endpoint paused after it was claimed waits for the endpoint:
/// `held` with no due time, no attempt spent, no ledger entry, the last outcome kept; new
/// messages still get a (waiting) delivery; nothing is claimed until the endpoint resumes.
pub async fn paused_endpoint_parks_without_spending(fx: Fixture) {
    let e = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    let got = claim_one(&fx, &for_webhooks()).await;
    let paused = EndpointUpdate {
        status: Some(EndpointStatus::Paused),
        ..Default::default()
    };
    let ep = fx
        .store()
        .update_endpoint(&acme, e.id, &paused)
        .await
        .expect("pause");
    assert_eq!(ep.status, EndpointStatus::Paused);
    let v = settle(&fx, &got, Outcome::EndpointPaused, &webhook_policy()).await;
    assert_eq!(
        v,
        Verdict::AwaitEndpoint {
            until: Timestamp::MAX
        }
    );
    let d = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Held, 0));
    assert_eq!(d.next_attempt_at, Timestamp::MAX);
    assert_eq!(d.last_outcome, None);
    assert!(fx
        .store()
        .attempts(&acme, d.id)
        .await
        .expect("attempts")
        .is_empty());
    assert_eq!(
        enqueue(&fx, msg("order.updated").tenant("acme"))
            .await
            .deliveries,
        1
    );
    fx.clock().advance(secs(30 * 24 * 3600));
    claim_none(&fx, &for_webhooks()).await;
    let resume = EndpointUpdate {
        status: Some(EndpointStatus::Active),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&acme, e.id, &resume)
        .await
        .expect("resume");
    let both = claim(&fx, &for_webhooks()).await;
    assert_eq!(both.len(), 2);
    assert_eq!(both[0].delivery.id, got.delivery.id);
    assert_eq!(both[0].lease.attempts, 1);
    // An attempt that fails, then a pause met mid-flight: no attempt recorded for the wait,
    // the last outcome there was is kept.
    settle(&fx, &both[0], http(503), &webhook_policy()).await;
    settle(&fx, &both[1], http(200), &webhook_policy()).await;
    fx.clock().advance(secs(60));
    let again = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(again.lease.attempts, 2);
    fx.store()
        .update_endpoint(&acme, e.id, &paused)
        .await
        .expect("pause again");
    settle(&fx, &again, Outcome::EndpointPaused, &webhook_policy()).await;
    let d = delivery(&fx, &acme, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Held, 1));
    assert_eq!(d.last_outcome.and_then(|l| l.status_code), Some(503));
    assert_eq!(
        fx.store()
            .attempts(&acme, d.id)
            .await
            .expect("attempts")
            .len(),
        1
    );
}

/// Deliveries to a deleted endpoint die as `endpoint-removed`; a disabled endpoint's wait
/// (`DISABLED_HOLD`) and then die as `endpoint-disabled` — both spending nothing.
pub async fn removed_and_disabled_endpoint_dead(fx: Fixture) {
    let removed = add_endpoint(&fx, "acme", "*").await;
    let disabled = add_endpoint(&fx, "acme", "*").await;
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    let acme = tenant("acme");
    fx.store()
        .delete_endpoint(&acme, removed.id)
        .await
        .expect("delete_endpoint");
    let off = EndpointUpdate {
        status: Some(EndpointStatus::Disabled(DisabledReason::Manual)),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&acme, disabled.id, &off)
        .await
        .expect("disable");
    let policy = webhook_policy();
    for expect in [removed.id, disabled.id] {
        if expect == disabled.id {
            fx.clock().advance(DISABLED_HOLD);
        }
        let c = &claim_one(&fx, &for_webhooks()).await;
        assert_eq!(c.delivery.destination.endpoint(), Some(expect));
        let id = c
            .delivery
            .destination
            .endpoint()
            .expect("a webhook delivery");
        let outcome = match fx.store().get_endpoint(&acme, id).await {
            Err(e) if e.kind() == ErrorKind::NotFound => Outcome::EndpointMissing,
            Ok(ep) if matches!(ep.status, EndpointStatus::Disabled(_)) => Outcome::EndpointDisabled,
            other => panic!("unexpected endpoint state: {other:?}"),
        };
        let v = settle(&fx, c, outcome, &policy).await;
        let want = if id == removed.id {
            DeadReason::EndpointRemoved
        } else {
            DeadReason::EndpointDisabled
        };
        assert_eq!(v, Verdict::Dead { reason: want });
        let d = delivery(&fx, &acme, c.delivery.id).await;
        assert_eq!(
            (d.status, d.dead_reason, d.attempts),
            (DeliveryStatus::Dead, Some(want), 0)
        );
        assert!(fx
            .store()
            .attempts(&acme, d.id)
            .await
            .expect("attempts")
            .is_empty());
    }
}

/// Other answers: a redirect is `redirect` and a 404 is `response-4xx`, both retried
/// after the policy delay with the attempt spent.
pub async fn verdict_redirect_and_4xx_retry(fx: Fixture) {
    add_endpoint(&fx, "default", "*").await;
    enqueue(&fx, msg("order.created")).await;
    let t = Default::default();
    let policy = webhook_policy();
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(
        settle(&fx, &got, http(302), &policy).await,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(60))
        }
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!(
        d.last_outcome.map(|l| (l.outcome, l.status_code)),
        Some((AttemptOutcome::Failed(ErrorClass::Redirect), Some(302)))
    );
    fx.clock().advance(secs(60));
    let got = claim_one(&fx, &for_webhooks()).await;
    assert_eq!(
        settle(&fx, &got, http(404), &policy).await,
        Verdict::Retry {
            at: now(&fx).saturating_add(secs(300))
        }
    );
    let d = delivery(&fx, &t, got.delivery.id).await;
    assert_eq!((d.status, d.attempts), (DeliveryStatus::Pending, 2));
    assert_eq!(
        d.last_outcome.map(|l| l.outcome),
        Some(AttemptOutcome::Failed(ErrorClass::Response4xx))
    );
}

/// Mail refused for the message is `dead` (`mail-refused`) at once; an unknown outcome
/// through a mailer that does not deduplicate is `dead` (`unknown-outcome`); a mail not
/// sent is retried.
pub async fn verdict_mail_refused_dead(fx: Fixture) {
    use outboxkit_core::{MailError, MailErrorCode, MailOutcome};
    enqueue(
        &fx,
        msg("order.created")
            .email("a@example.com")
            .email("b@example.com")
            .email("c@example.com"),
    )
    .await;
    let t = Default::default();
    let policy = webhook_policy();
    let got = claim(&fx, &for_email()).await;
    assert_eq!(got.len(), 3);
    let answers = [
        MailError::new(
            MailErrorCode::MessageRefused,
            MailOutcome::NotSent,
            "rejected",
        ),
        MailError::new(MailErrorCode::Timeout, MailOutcome::Unknown, "no answer"),
        MailError::new(
            MailErrorCode::Unavailable,
            MailOutcome::NotSent,
            "try later",
        ),
    ];
    let want = [
        (DeliveryStatus::Dead, Some(DeadReason::MailRefused)),
        (DeliveryStatus::Dead, Some(DeadReason::UnknownOutcome)),
        (DeliveryStatus::Pending, None),
    ];
    for ((c, answer), want) in got.iter().zip(answers).zip(want) {
        fx.store()
            .mark_sending(&c.lease)
            .await
            .expect("mark_sending");
        settle(&fx, c, Outcome::Mail(Err(answer)), &policy).await;
        let d = delivery(&fx, &t, c.delivery.id).await;
        assert_eq!((d.status, d.dead_reason), want);
        assert_eq!(d.attempts, 1);
        assert_eq!(d.lease_until, None);
    }
}
