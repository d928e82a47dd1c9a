//! Writing what finished: verdicts in one `complete_many`, releases grouped by delay, and
//! the report, observer and dead-letter alerts that follow from them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::alerts;
use super::attempt::{Done, Meta, RunState};
use super::breaker::CircuitState;
use super::report::{observe, CircuitEvent, DeadLetterEvent, DeliveryEvent, Report, SettleEvent};
use super::Shared;
use outboxkit_core::claim::{Completion, Lease};
use outboxkit_core::error::Result;
use outboxkit_core::model::DeadReason;
use outboxkit_core::verdict::Verdict;

/// Write what finished — verdicts in one `complete_many`, releases grouped by delay — and
/// return what that adds to the report. Runs beside the claim loop, so a batch's completion
/// overlaps the next batch's claim.
pub(crate) async fn settle(shared: Arc<Shared>, run: Arc<RunState>, finished: Vec<Done>) -> Report {
    let watch = outboxkit_core::Stopwatch::start();
    let mut report = Report::default();
    let s = &shared;
    let mut items: Vec<(Lease, Completion)> = Vec::new();
    let mut metas: Vec<Meta> = Vec::new();
    let mut releases: BTreeMap<Duration, Vec<Lease>> = BTreeMap::new();
    // Delays of the releases over a rate limit: `run_once` waits for them.
    let mut rate_delays: Vec<Duration> = Vec::new();
    for done in finished {
        match done {
            Done::Completed {
                lease,
                completion,
                meta,
            } => {
                items.push((lease, completion));
                metas.push(*meta);
            }
            Done::Release {
                lease,
                delay,
                duplicate,
                rate_limited,
            } => {
                if duplicate {
                    report.duplicate_in_run += 1;
                }
                if rate_limited {
                    rate_delays.push(delay);
                }
                releases.entry(delay).or_default().push(lease);
            }
            Done::LeaseLost => report.lease_lost += 1,
        }
    }
    if !items.is_empty() {
        match retry_store(|| s.store.complete_many(&items)).await {
            Ok(results) => {
                for (((lease, completion), meta), r) in items.iter().zip(&metas).zip(results) {
                    match r {
                        Ok(()) => completed(s, &mut report, lease, completion, meta),
                        Err(e) if e.is_lease_lost() => report.lease_lost += 1,
                        Err(e) => {
                            tracing::warn!(error = %e, delivery_id = %lease.delivery_id, "completing a delivery failed; its lease will expire")
                        }
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, count = items.len(), "completing deliveries failed; their leases will expire and they will run again")
            }
        }
    }
    for (delay, leases) in releases {
        match retry_store(|| s.store.release(&leases, delay)).await {
            Ok(r) => {
                report.released += u64::from(r.released);
                report.lease_lost += u64::from(r.lost);
                if rate_delays.contains(&delay) {
                    // Read after the write: the store's due time is at or before this one.
                    run.rate_limited(s.clock.now().saturating_add(delay));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "releasing deliveries failed; their leases will expire")
            }
        }
    }
    if let Some(o) = &s.observer {
        let event = SettleEvent {
            completed: report.completed(),
            released: report.released,
            lease_lost: report.lease_lost,
            duration: watch.elapsed(),
        };
        observe(|| o.on_settle(&event));
    }
    report
}

fn completed(
    shared: &Shared,
    report: &mut Report,
    lease: &Lease,
    completion: &Completion,
    meta: &Meta,
) {
    report.record_verdict(&meta.topic, lease.delivery_id, &completion.verdict);
    tracing::debug!(delivery_id = %lease.delivery_id, verdict = completion.verdict.name(), "delivery completed");
    if let Some(o) = &shared.observer {
        let event = DeliveryEvent {
            delivery_id: lease.delivery_id,
            topic: &meta.topic,
            kind: meta.kind,
            attempt: meta.attempt,
            verdict: &completion.verdict,
            duration: meta.duration,
            started_at: meta.started,
            message_id: meta.message_id,
            endpoint: meta.endpoint,
            outcome: completion.attempt.as_ref().map(|a| a.outcome),
            status_code: completion.attempt.as_ref().and_then(|a| a.status_code),
            traceparent: meta.traceparent,
        };
        observe(|| o.on_delivery(&event));
    }
    if let Verdict::Dead { reason } = completion.verdict {
        dead_letter(shared, lease, meta, reason);
    }
    if let Some(t) = &meta.circuit {
        circuit_changed(shared, report, meta, t);
    }
}

/// Count, log and tell the observer that an endpoint's circuit changed.
fn circuit_changed(
    shared: &Shared,
    report: &mut Report,
    meta: &Meta,
    t: &super::breaker::Transition,
) {
    match t.state {
        CircuitState::Open { until } => {
            report.circuits_opened += 1;
            tracing::warn!(endpoint_id = %t.endpoint, failures = t.failures, until = %until, "the endpoint's circuit opened: its deliveries wait without spending attempts");
        }
        CircuitState::Closed => {
            report.circuits_closed += 1;
            tracing::info!(endpoint_id = %t.endpoint, "the endpoint's circuit closed");
        }
        CircuitState::HalfOpen => {}
    }
    if let Some(o) = &shared.observer {
        let event = CircuitEvent {
            endpoint: t.endpoint,
            tenant: &meta.tenant,
            state: t.state,
            failures: t.failures,
        };
        observe(|| o.on_circuit(&event));
    }
}

/// Tell the observer and the operator's alerts that a delivery went dead (never waits).
fn dead_letter(shared: &Shared, lease: &Lease, meta: &Meta, reason: DeadReason) {
    if let Some(o) = &shared.observer {
        let event = DeadLetterEvent {
            delivery_id: lease.delivery_id,
            tenant: &meta.tenant,
            topic: &meta.topic,
            kind: meta.kind,
            reason,
            attempts: meta.attempt,
        };
        observe(|| o.on_dead(&event));
    }
    if let Some(a) = &shared.alerts {
        a.dead(alerts::DeadItem {
            delivery_id: lease.delivery_id,
            tenant: meta.tenant.clone(),
            topic: meta.topic.clone(),
            kind: meta.kind,
            reason,
            attempts: meta.attempt,
        });
    }
}

/// Call the store up to three times while it says the failure is retryable.
async fn retry_store<T, F, Fut>(mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut wait = Duration::from_millis(50);
    let mut tries = 0;
    loop {
        match f().await {
            Err(e) if e.is_retryable() && tries < 3 => {
                tries += 1;
                tokio::time::sleep(wait).await;
                wait *= 4;
            }
            other => return other,
        }
    }
}
