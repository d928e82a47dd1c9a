//! [`MetricsObserver`] (feature `metrics`): the dispatcher's figures through the `metrics`
//! facade, for whatever recorder the application installs (a Prometheus exporter, StatsD,
//! OpenTelemetry through a bridge). Without an installed recorder every call is a no-op.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `outbox_deliveries_total` | counter | `channel`, `outcome` | attempts finished, by verdict (`succeeded`, `retry`, `held`, `dead`, `snoozed`, `parked`, `await-endpoint`) |
//! | `outbox_attempt_duration_seconds` | histogram | `channel` | one attempt (handler call, webhook request, mail send) |
//! | `outbox_released_total` | counter | | deliveries given back without spending an attempt (limits, shutdown) |
//! | `outbox_lease_lost_total` | counter | | finished deliveries whose lease another worker had taken |
//! | `outbox_claims_total` | counter | `result` (`claimed`, `empty`, `failed`) | claims |
//! | `outbox_claimed_total` | counter | | deliveries claimed |
//! | `outbox_claim_duration_seconds` | histogram | | the store's claim |
//! | `outbox_completion_duration_seconds` | histogram | | the store's write-back of a group of finished deliveries |
//! | `outbox_deliveries` | gauge | `status` (`pending`, `processing`, `sending`, `held`) | unfinished deliveries by status, from [`record_stats`]; finished ones are counted by `outbox_deliveries_total` |
//! | `outbox_oldest_due_age_seconds` | gauge | | how long the oldest due delivery has waited, from [`record_stats`] (0 when none is due) |
//!
//! No label carries a tenant, a topic, an endpoint, an address or a payload: the label sets
//! stay small and nothing private reaches the scrape.

use outboxkit_core::store::Stats;
use outboxkit_core::DeliveryStatus;

use crate::report::{ClaimEvent, DeadLetterEvent, DeliveryEvent, Observer, SettleEvent};

/// An [`Observer`] that records the dispatcher's figures through the `metrics` facade (the
/// table in this module's docs). Give it to `DispatcherBuilder::observer`; wrap it in your own
/// observer to add logging.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsObserver;

impl Observer for MetricsObserver {
    fn on_delivery(&self, event: &DeliveryEvent<'_>) {
        let channel = event.kind.as_str();
        metrics::counter!("outbox_deliveries_total", "channel" => channel, "outcome" => event.verdict.name())
            .increment(1);
        metrics::histogram!("outbox_attempt_duration_seconds", "channel" => channel)
            .record(event.duration.as_secs_f64());
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
}

/// Set the queue gauges from the store's unfinished counts (`store.queue_stats()`, whose
/// cost does not grow with the finished history): call it on a timer or before each scrape.
/// Only the unfinished statuses get a gauge; `succeeded` and `dead` are totals of history,
/// which `outbox_deliveries_total` counts as they happen.
pub fn record_stats(stats: &Stats) {
    for status in [
        DeliveryStatus::Pending,
        DeliveryStatus::Processing,
        DeliveryStatus::Sending,
        DeliveryStatus::Held,
    ] {
        metrics::gauge!("outbox_deliveries", "status" => status.as_str())
            .set(stats.count(status) as f64);
    }
    metrics::gauge!("outbox_oldest_due_age_seconds")
        .set(stats.oldest_due_age.map_or(0.0, |d| d.as_secs_f64()));
}
