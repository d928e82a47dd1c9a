//! One delivery, start to verdict: the checks before starting (duplicates, shutdown, the
//! breaker, the budget reservation), the channel call, and classification.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::breaker::{Pass, Signal};
use super::dedup::{key_outcome, reserve_key, Reserve};
use super::handler::{Context, HandlerResult};
use super::lease::{keep_alive, LiveLease};
use super::limits::Admit;
use super::permits::Grant;
use super::webhook::{endpoint_gate, signed_request_keyed, EndpointCache};

use super::attempt::{completed, context, gate, record, verdict_policy, Done, Gate, RunState};
use super::Shared;
use crate::timer::TimerExt;
use outboxkit_core::claim::{Claimed, Lease};
use outboxkit_core::ids::{ConsumerName, EndpointId};
use outboxkit_core::model::{
    excerpt, AttemptOutcome, AttemptRecord, Cause, Delivery, Destination, ErrorClass, Message,
};
use outboxkit_core::verdict::{classify, HandlerOutcome, Outcome, Verdict};

pub(crate) async fn deliver(
    shared: Arc<Shared>,
    run: Arc<RunState>,
    endpoints: Arc<EndpointCache>,
    claimed: Claimed,
) -> Done {
    let Claimed {
        lease,
        delivery,
        message,
    } = claimed;
    let first = run
        .started
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(delivery.id);
    if !first {
        // Handed out again while this run has it: never run it twice.
        let delay = match run.deadline {
            Some(d) => d
                .duration_since(shared.clock.now())
                .max(shared.config.poll_interval),
            None => shared.config.lease,
        };
        return Done::duplicate(lease, delay);
    }
    // The producer's trace context, for the observer (read before the handler takes the
    // message).
    let traceparent = outboxkit_core::Traceparent::from_headers(&message.headers);
    let mut done = match &delivery.destination {
        Destination::Handler(c) if shared.brokers.contains_key(c) => {
            super::broker::broker_path(&shared, &run, lease, &delivery, &message, c).await
        }
        Destination::Handler(c) => handler_path(&shared, &run, lease, &delivery, message, c).await,
        Destination::Webhook(e) => {
            webhook_path(&shared, &run, &endpoints, lease, &delivery, &message, *e).await
        }
        Destination::Email(r) => {
            super::email::email_path(&shared, &run, lease, &delivery, &message, r).await
        }
    };
    if let Done::Completed { meta, .. } = &mut done {
        meta.traceparent = traceparent;
    }
    if !run.whole_run() || matches!(done, Done::Release { .. }) {
        run.started
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&delivery.id);
    }
    done
}

async fn handler_path(
    shared: &Shared,
    run: &RunState,
    lease: Lease,
    delivery: &Delivery,
    message: Message,
    consumer: &ConsumerName,
) -> Done {
    let Some(reg) = shared.handlers.get(consumer) else {
        // Only registered consumers are claimed; a config change between claim and run.
        return Done::release(lease, shared.config.poll_interval);
    };
    // Wait for a permit, unless the run stops first: unstarted work goes back at once.
    let permit = tokio::select! {
        p = reg.semaphore.clone().acquire_owned() => p.ok(),
        () = run.stopping.cancelled() => None,
    };
    let Some(_permit) = permit else {
        return Done::release_now(lease);
    };
    if let Gate::Release(delay) = gate(shared, run, reg.options.timeout, Some(consumer)) {
        return Done::release(lease, delay);
    }
    let started = shared.clock.now();
    let guard = match reserve_key(shared, reg, &message, delivery.id, started) {
        Reserve::Go(guard) => guard,
        Reserve::Taken(delay) => return Done::release(lease, delay),
        Reserve::Skip => {
            let rec = AttemptRecord {
                detail: None,
                started_at: started,
                finished_at: started,
                outcome: AttemptOutcome::Succeeded,
                status_code: None,
                excerpt: Some("skipped: the dedup key succeeded recently".into()),
            };
            return completed(
                lease,
                Verdict::Succeeded,
                Some(rec),
                delivery,
                started,
                started,
            );
        }
    };
    let lease_attempts = lease.attempts;
    // Cancelled at shutdown, at the timeout, or when the lease is lost.
    let cancel = run.shutdown.child_token();
    let live = LiveLease::new(lease);
    let ctx = Context {
        delivery_id: delivery.id,
        consumer: consumer.clone(),
        attempt: lease_attempts,
        cancel: cancel.clone(),
        store: shared.store.clone(),
        cause: Cause {
            handler: consumer.clone(),
            message_id: message.id,
            topic: message.topic.clone(),
            depth: message
                .cause
                .as_ref()
                .map_or(0, |c| c.depth)
                .saturating_add(1),
        },
        max_depth: shared.config.max_depth,
        tenant: delivery.tenant.clone(),
        emits: reg.options.emits.clone(),
        traceparent: outboxkit_core::Traceparent::from_headers(&message.headers),
    };
    let call = AssertUnwindSafe(reg.handler.handle(ctx, message)).catch_unwind();
    let (outcome, text) = tokio::select! {
        r = call => match r {
            Ok(HandlerResult::Ok) => (HandlerOutcome::Ok, String::new()),
            Ok(HandlerResult::Retry(why)) => (HandlerOutcome::Retry, why),
            Ok(HandlerResult::Snooze { delay, reason }) => (HandlerOutcome::Snooze(delay), reason),
            Ok(HandlerResult::Discard(why)) => (HandlerOutcome::Discard, why),
            Err(_) => (HandlerOutcome::Retry, "the handler panicked".to_owned()),
        },
        () = shared.clock.sleep(reg.options.timeout) => {
            cancel.cancel();
            (HandlerOutcome::Timeout, "the handler timed out".to_owned())
        }
        never = keep_alive(shared, &live, &cancel) => match never {},
    };
    let lost = live.is_lost();
    let lease = live.into_lease();
    if lost {
        // Another worker has it: write nothing (the dedup key expires by itself).
        return Done::LeaseLost;
    }
    if run.shutdown.is_cancelled()
        && matches!(outcome, HandlerOutcome::Retry | HandlerOutcome::Timeout)
    {
        // Stopped by the shutdown: put it back with the attempt refunded, like an abort.
        return Done::release_now(lease);
    }
    let finished = shared.clock.now();
    let outcome = Outcome::Handler(outcome);
    let policy = verdict_policy(shared, reg.options.retry.clone(), false);
    let verdict = classify(&outcome, &context(shared, &lease), &policy);
    if let Verdict::Snoozed { until } = verdict {
        run.trip(consumer, until);
    }
    if let Some(g) = guard {
        let ttl = reg.options.dedup.as_ref().map_or(Duration::ZERO, |d| d.ttl);
        g.finish(key_outcome(&verdict, finished, ttl, shared.config.lease));
    }
    completed(
        lease,
        verdict,
        record(&outcome, started, finished, &text),
        delivery,
        started,
        finished,
    )
}

async fn webhook_path(
    shared: &Shared,
    run: &RunState,
    endpoints: &EndpointCache,
    lease: Lease,
    delivery: &Delivery,
    message: &Message,
    endpoint_id: EndpointId,
) -> Done {
    let Some(ch) = &shared.webhooks else {
        return Done::release(lease, shared.config.poll_interval);
    };
    let now = shared.clock.now();
    let policy = verdict_policy(shared, ch.policy.for_tenant(&delivery.tenant), false);
    let endpoint = match endpoints
        .get(&*shared.store, &delivery.tenant, endpoint_id)
        .await
    {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "reading the endpoint failed; releasing the delivery");
            return Done::release(lease, shared.config.poll_interval);
        }
    };
    if let Some(outcome) = endpoint_gate(endpoint.as_deref()) {
        let verdict = classify(&outcome, &context(shared, &lease), &policy);
        return completed(lease, verdict, None, delivery, now, now);
    }
    let Some(endpoint) = endpoint else {
        return Done::release(lease, shared.config.poll_interval);
    };
    let secrets = match ch.keys.get(&*ch.vault, &endpoint).await {
        Ok(s) => s,
        Err(e) => {
            // Our configuration, not the receiver: park it without spending an attempt, and
            // say why in the ledger (the error names no secret).
            // (The error names a header whose value does not open, never a value.)
            tracing::error!(error = %e, endpoint = %endpoint.id, "cannot open the endpoint's secret; parking the delivery");
            let verdict = Verdict::Parked {
                until: now.saturating_add(shared.config.park_delay),
            };
            let why = AttemptRecord {
                detail: None,
                started_at: now,
                finished_at: now,
                outcome: AttemptOutcome::Failed(ErrorClass::SecretUnavailable),
                status_code: None,
                excerpt: Some(excerpt(&format!(
                    "the endpoint's secret cannot be opened (check the vault key): {e}"
                ))),
            };
            return completed(lease, verdict, Some(why), delivery, now, now);
        }
    };
    if let Gate::Release(delay) = gate(shared, run, shared.config.webhook_timeout, None) {
        return Done::release(lease, delay);
    }
    // An open circuit: back without spending an attempt, due when the next probe may go.
    shared
        .breakers
        .seed(endpoint.id, endpoint.last_delivery.as_ref());
    // One probe at a time: the others go back for a poll interval (the endpoint is left
    // out of claims until the probe's outcome is known).
    let probe = match shared.breakers.pass(
        &endpoint.id,
        shared.clock.now(),
        shared.config.poll_interval,
    ) {
        Pass::Go { probe } => probe,
        Pass::Wait(delay) => return Done::release(lease, delay),
    };
    let admitted_at = shared.clock.now();
    let _permit = match shared.limits.admit(
        endpoint.id,
        endpoint.rate_limit,
        Some(shared.config.concurrency_for(endpoint.id)),
        admitted_at,
    ) {
        Admit::Go(permit) => permit,
        // Not started: back without spending an attempt, due when it may go.
        refused => {
            if probe {
                shared.breakers.probe_abandoned(&endpoint.id);
            }
            // At its cap: due again at once; the endpoint stays out of claims while it is
            // at its cap, so this does not spin.
            return match refused {
                Admit::RateLimited(wait) => Done::rate_limited(lease, wait),
                _ => Done::release_now(lease),
            };
        }
    };
    // The rate holds across dispatchers: a start needs the store's permit too (this
    // process's bucket above only saves the calls it would refuse anyway).
    if let Some(rate) = endpoint.rate_limit {
        let key = (delivery.tenant.clone(), endpoint.id, rate);
        let grant = shared
            .permits
            .take(
                &shared.store,
                &shared.clock,
                key,
                shared.config.poll_interval,
            )
            .await;
        // Not started: back without spending an attempt, due when a permit may be free
        // (or, when the store failed, after the wait it named).
        let not_started = || {
            shared.limits.unspend(endpoint.id, admitted_at);
            if probe {
                shared.breakers.probe_abandoned(&endpoint.id);
            }
        };
        match grant {
            Grant::Go => {}
            Grant::RateLimited(wait) => {
                not_started();
                return Done::rate_limited(lease, wait);
            }
            Grant::Failed(wait) => {
                not_started();
                return Done::release(lease, wait);
            }
        }
    }
    let started = shared.clock.now();
    let request = signed_request_keyed(
        &endpoint,
        &secrets.keys,
        message,
        delivery.id,
        started,
        &shared.names,
        shared.config.webhook_timeout,
    );
    let request = super::webhook::with_custom_headers(request, &secrets.headers);
    let request = super::webhook::forward_traceparent(request, message, &shared.config);
    // A transport that panics spends the attempt like a failed send (and the ledger says
    // so): a bug in it cannot hand the same delivery out again and again.
    let sent = AssertUnwindSafe(ch.transport.send_detailed(request))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            tracing::error!(delivery_id = %delivery.id, "the webhook transport panicked");
            outboxkit_core::transport::Sent {
                response: outboxkit_core::transport::WebhookResponse::Failed {
                    class: outboxkit_core::model::ErrorClass::Network,
                    detail: "the webhook transport panicked".to_owned(),
                },
                detail: None,
            }
        });
    let outboxkit_core::transport::Sent {
        response,
        mut detail,
    } = sent;
    if let Some(d) = &mut detail {
        super::webhook::redact_secret_headers(d, &endpoint);
    }
    let finished = shared.clock.now();
    let outcome = response.outcome();
    let transition = shared
        .breakers
        .record(endpoint.id, Signal::of(&outcome), probe, finished);
    let verdict = classify(&outcome, &context(shared, &lease), &policy);
    let mut rec = record(&outcome, started, finished, response.excerpt());
    if let Some(r) = &mut rec {
        r.detail = detail;
    }
    let mut done = completed(lease, verdict, rec, delivery, started, finished);
    if let Done::Completed { meta, .. } = &mut done {
        meta.circuit = transition;
    }
    done
}
