//! [`MetricsObserver`] (feature `metrics`): the dispatcher's figures through the `metrics`
//! facade, for whatever recorder the application installs (a Prometheus exporter, StatsD,
//! OpenTelemetry through a bridge). Without an installed recorder every call is a no-op.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `outbox_attempts_total` | counter | `channel`, `outcome` | attempts finished, by verdict (`succeeded`, `retry`, `held`, `dead`, `snoozed`, `parked`, `await-endpoint`) |
//! | `outbox_attempt_duration_seconds` | histogram | `channel` | one attempt (handler call, webhook request, mail send) |
//! | `outbox_released_total` | counter | | deliveries given back without spending an attempt (limits, shutdown) |
//! | `outbox_lease_lost_total` | counter | | finished deliveries whose lease another worker had taken |
//! | `outbox_claims_total` | counter | `result` (`claimed`, `empty`, `failed`) | claims |
//! | `outbox_claimed_total` | counter | | deliveries claimed |
//! | `outbox_claim_duration_seconds` | histogram | | the store's claim |
//! | `outbox_completion_duration_seconds` | histogram | | the store's write-back of a group of finished deliveries |
//! | `outbox_endpoint_circuit_opened_total` | counter | `endpoint` (id, capped) | times an endpoint's circuit opened after consecutive retryable failures (a failed probe opens it again) |
//! | `outbox_endpoint_failed_attempts_total` | counter | `endpoint` (id, capped) | webhook attempts that failed (a retry, a hold or dead after a request was tried: refused, timed out, 4xx, 5xx, ...) |
//! | `outbox_unfinished_deliveries` | gauge | `status` (`pending`, `processing`, `sending`, `held`) | unfinished deliveries by status, from [`record_stats`]; finished attempts are counted by `outbox_attempts_total` |
//! | `outbox_oldest_due_age_seconds` | gauge | | how long the oldest due delivery has waited, from [`record_stats`] (0 when none is due) |
//! | `outbox_build_info` | gauge | `version` | always 1, from [`MetricsObserver::build_info`] |
//!
//! Every family has HELP text naming its unit once [`MetricsObserver::describe`] has run
//! (after the recorder is installed). No label carries a tenant, a topic, an address or a
//! payload. The two per-endpoint families label by the endpoint's opaque id (never its URL),
//! and only the first [`MetricsObserver::ENDPOINT_LABEL_CAP`] distinct endpoints of the
//! process get a label value of their own (the same ones in both families); the rest are
//! counted under `endpoint="other"`, so the label set stays bounded however many endpoints a
//! deployment has.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use metrics::Unit;
use outboxkit_core::store::Stats;
use outboxkit_core::DeliveryStatus;

use crate::report::{
    CircuitEvent, ClaimEvent, DeadLetterEvent, DeliveryEvent, Observer, SettleEvent,
};
use crate::CircuitState;

/// An [`Observer`] that records the dispatcher's figures through the `metrics` facade (the
/// table in this module's docs). Give it to `DispatcherBuilder::observer`; wrap it in your own
/// observer to add logging.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsObserver;

/// The endpoint ids that have a label value of their own (process-wide, like the recorder).
fn labelled_endpoints() -> &'static Mutex<HashSet<String>> {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(HashSet::new()))
}

/// The `endpoint` label value for `id`: the id itself while fewer than `cap` distinct ids
/// have one (or it already has one), `other` after that.
fn endpoint_label(seen: &Mutex<HashSet<String>>, id: &str, cap: usize) -> String {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.contains(id) {
        return id.to_owned();
    }
    if seen.len() < cap {
        seen.insert(id.to_owned());
        return id.to_owned();
    }
    "other".to_owned()
}

impl MetricsObserver {
    /// How many distinct endpoint ids get a label value of their own in
    /// `outbox_endpoint_circuit_opened_total` and `outbox_endpoint_failed_attempts_total`;
    /// later ones are counted as `endpoint="other"`.
    pub const ENDPOINT_LABEL_CAP: usize = 100;

    /// The `endpoint` label value of endpoint `id` in the per-endpoint families (capped at
    /// [`Self::ENDPOINT_LABEL_CAP`] distinct ids per process, then `other`).
    fn endpoint_label(id: &str) -> String {
        endpoint_label(labelled_endpoints(), id, Self::ENDPOINT_LABEL_CAP)
    }

    /// Give every family in the table its HELP text and unit. Call it once, after the
    /// recorder is installed (a recorder installed later never sees the descriptions).
    pub fn describe() {
        metrics::describe_counter!(
            "outbox_attempts_total",
            Unit::Count,
            "Delivery attempts finished, by channel and outcome (succeeded, retry, held, dead, snoozed, parked, await-endpoint)."
        );
        metrics::describe_histogram!(
            "outbox_attempt_duration_seconds",
            Unit::Seconds,
            "Duration of one delivery attempt (handler call, webhook request, mail send), in seconds."
        );
        metrics::describe_counter!(
            "outbox_released_total",
            Unit::Count,
            "Deliveries given back to the store without spending an attempt (limits, shutdown)."
        );
        metrics::describe_counter!(
            "outbox_lease_lost_total",
            Unit::Count,
            "Finished deliveries whose outcome was dropped because another worker had taken the lease."
        );
        metrics::describe_counter!(
            "outbox_claims_total",
            Unit::Count,
            "Claims made against the store, by result (claimed, empty, failed)."
        );
        metrics::describe_counter!(
            "outbox_claimed_total",
            Unit::Count,
            "Deliveries claimed from the store."
        );
        metrics::describe_histogram!(
            "outbox_claim_duration_seconds",
            Unit::Seconds,
            "Duration of the store's claim, in seconds."
        );
        metrics::describe_histogram!(
            "outbox_completion_duration_seconds",
            Unit::Seconds,
            "Duration of the store's write-back of a group of finished deliveries, in seconds."
        );
        metrics::describe_counter!(
            "outbox_endpoint_circuit_opened_total",
            Unit::Count,
            "Times an endpoint's circuit opened after consecutive retryable failures, by endpoint id (the first 100 endpoints; the rest as endpoint=\"other\")."
        );
        metrics::describe_counter!(
            "outbox_endpoint_failed_attempts_total",
            Unit::Count,
            "Webhook attempts that failed (retry, held or dead after a request was tried), by endpoint id (the first 100 endpoints; the rest as endpoint=\"other\")."
        );
        metrics::describe_gauge!(
            "outbox_unfinished_deliveries",
            Unit::Count,
            "Unfinished deliveries by status (pending, processing, sending, held), read at each scrape."
        );
        metrics::describe_gauge!(
            "outbox_oldest_due_age_seconds",
            Unit::Seconds,
            "Age of the oldest due delivery, in seconds (0 when none is due)."
        );
    }

    /// Set `outbox_build_info{version="…"} 1` (with its HELP text) for the binary's `version`.
    pub fn build_info(version: &str) {
        metrics::describe_gauge!(
            "outbox_build_info",
            "The running binary's version, as the version label; the value is always 1."
        );
        metrics::gauge!("outbox_build_info", "version" => version.to_owned()).set(1.0);
    }
}

impl Observer for MetricsObserver {
    fn on_delivery(&self, event: &DeliveryEvent<'_>) {
        let channel = event.kind.as_str();
        metrics::counter!("outbox_attempts_total", "channel" => channel, "outcome" => event.verdict.name())
            .increment(1);
        metrics::histogram!("outbox_attempt_duration_seconds", "channel" => channel)
            .record(event.duration.as_secs_f64());
        if let Some(id) = event.endpoint.filter(|_| event.failed()) {
            let endpoint = Self::endpoint_label(&id.to_string());
            metrics::counter!("outbox_endpoint_failed_attempts_total", "endpoint" => endpoint)
                .increment(1);
        }
    }

    fn on_dead(&self, event: &DeadLetterEvent<'_>) {
        // Counted by `on_delivery` under outcome `dead`.
        let _ = event;
    }

    fn on_claim(&self, event: &ClaimEvent) {
        let result = if event.failed {
            "failed"
        } else if event.size == 0 {
            "empty"
        } else {
            "claimed"
        };
        metrics::counter!("outbox_claims_total", "result" => result).increment(1);
        metrics::counter!("outbox_claimed_total").increment(event.size as u64);
        metrics::histogram!("outbox_claim_duration_seconds").record(event.duration.as_secs_f64());
    }

    fn on_settle(&self, event: &SettleEvent) {
        metrics::counter!("outbox_released_total").increment(event.released);
        metrics::counter!("outbox_lease_lost_total").increment(event.lease_lost);
        metrics::histogram!("outbox_completion_duration_seconds")
            .record(event.duration.as_secs_f64());
    }

    fn on_circuit(&self, event: &CircuitEvent<'_>) {
        if matches!(event.state, CircuitState::Open { .. }) {
            let endpoint = Self::endpoint_label(&event.endpoint.to_string());
            metrics::counter!("outbox_endpoint_circuit_opened_total", "endpoint" => endpoint)
                .increment(1);
        }
    }
}

/// Set the queue gauges from the store's unfinished counts (`store.queue_stats()`, whose
/// cost does not grow with the finished history): call it on a timer or before each scrape.
/// Only the unfinished statuses get a gauge; `succeeded` and `dead` are totals of history,
/// which `outbox_attempts_total` counts as they happen.
pub fn record_stats(stats: &Stats) {
    for status in [
        DeliveryStatus::Pending,
        DeliveryStatus::Processing,
        DeliveryStatus::Sending,
        DeliveryStatus::Held,
    ] {
        metrics::gauge!("outbox_unfinished_deliveries", "status" => status.as_str())
            .set(stats.count(status) as f64);
    }
    metrics::gauge!("outbox_oldest_due_age_seconds")
        .set(stats.oldest_due_age.map_or(0.0, |d| d.as_secs_f64()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_labels_stop_at_the_cap_and_known_ids_keep_theirs() {
        let seen = Mutex::new(HashSet::new());
        assert_eq!(endpoint_label(&seen, "a", 2), "a");
        assert_eq!(endpoint_label(&seen, "b", 2), "b");
        assert_eq!(endpoint_label(&seen, "c", 2), "other");
        assert_eq!(endpoint_label(&seen, "a", 2), "a");
        assert_eq!(endpoint_label(&seen, "d", 2), "other");
        assert_eq!(seen.lock().unwrap().len(), 2);
    }
}
