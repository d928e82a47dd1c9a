//! [`DispatcherConfig`]: every knob of the dispatcher, with documented defaults, validated
//! once at `build()`.

use std::collections::BTreeMap;
use std::time::Duration;

use outboxkit_core::error::{Error, Result};
use outboxkit_core::ids::{EndpointId, Topic};

/// How the dispatcher claims, runs and completes deliveries.
#[derive(Clone, Debug, PartialEq)]
pub struct DispatcherConfig {
    /// Deliveries per claim (1–1000). Default 100.
    pub batch_size: u32,
    /// How long a claim is held before another worker may take the delivery. Default 40 s
    /// (the webhook timeout plus 30 s). Must exceed every handler timeout and the webhook
    /// timeout.
    pub lease: Duration,
    /// How often an idle dispatcher polls when no wake-up arrives. Default 1 s.
    pub poll_interval: Duration,
    /// Deliveries running at once, over every channel. Default 64.
    pub concurrency: usize,
    /// Deliveries running at once per handler, unless its options say otherwise. Default 16.
    pub handler_concurrency: usize,
    /// How long `run` waits for in-flight deliveries after shutdown before releasing them.
    /// Default 10 s.
    pub shutdown_grace: Duration,
    /// The webhook deadline over connect, headers and body. Default 10 s.
    pub webhook_timeout: Duration,
    /// The time reserved beyond a delivery's timeout before `run_once` starts it. Default 2 s.
    pub reservation_margin: Duration,
    /// How often a held delivery is probed. Default 1 h.
    pub held_probe_interval: Duration,
    /// How long a delivery to a paused endpoint is parked. Default 60 s.
    pub park_delay: Duration,
    /// Snoozes a delivery may take before a snooze counts as a retry. Default 5.
    pub max_snoozes: u32,
    /// The deepest chain of follow-up messages handlers may emit. Default 5.
    pub max_depth: u32,
    /// The Standard Webhooks header prefix. Default `webhook-`.
    pub header_prefix: String,
    /// Topics whose old unfinished deliveries never hold back newer ones with the same
    /// ordering key.
    pub dormant_topics: Vec<Topic>,
    /// How long the report waits for queue statistics. Default 500 ms.
    pub stats_deadline: Duration,
    /// The deadline of one e-mail send. A mailer still busy then is abandoned and the send
    /// counts as an `Unknown` outcome (it may have gone out). `None` (the default) uses
    /// `webhook_timeout`; a value must be shorter than the lease.
    pub mail_timeout: Option<Duration>,
    /// The installation prefix of mail idempotency keys (`<prefix>-<delivery id>`): give
    /// each application or environment sharing one mail-service account its own. 1–163
    /// visible ASCII characters. Default `outbox`.
    pub mail_key_prefix: String,
    /// Webhook requests in flight at once per endpoint, unless overridden, so that one slow
    /// or hanging receiver cannot hold every slot. `None` (the default) is a quarter of
    /// `concurrency`, at least 1; `Some(concurrency)` lifts the cap. A claim takes no more
    /// deliveries to an endpoint than its cap lets start (the cap less what the run already
    /// holds for it), so deliveries are not claimed only to be handed back; a delivery that
    /// still meets the cap (another run of the same dispatcher) is released without
    /// spending an attempt, due again at once.
    pub endpoint_concurrency: Option<usize>,
    /// Per-endpoint overrides of `endpoint_concurrency`, by endpoint id (1–10000 each).
    pub endpoint_concurrency_overrides: BTreeMap<EndpointId, usize>,
    /// Send a message's W3C `traceparent` header (see `NewMessage::traceparent`) with its
    /// webhook requests, so a receiver that traces continues the producer's trace. Off by
    /// default: it tells the receiver the producer's trace id. Default `false`.
    pub forward_traceparent: bool,
    /// Consecutive failures of the retryable kinds (timeout, connection error, 5xx) that
    /// open an endpoint's circuit: its deliveries are then not claimed and spend no attempts
    /// until the cool-down ends and one probe succeeds. Default 5; `None` turns the
    /// circuit breaker off.
    pub breaker_threshold: Option<u32>,
    /// How long a circuit stays open the first time. Default 5 s; it doubles after every
    /// failed probe, up to `breaker_max_cooldown`.
    pub breaker_cooldown: Duration,
    /// The longest cool-down. Default 5 min.
    pub breaker_max_cooldown: Duration,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        DispatcherConfig {
            batch_size: 100,
            lease: Duration::from_secs(40),
            poll_interval: Duration::from_secs(1),
            concurrency: 64,
            handler_concurrency: 16,
            shutdown_grace: Duration::from_secs(10),
            webhook_timeout: Duration::from_secs(10),
            reservation_margin: Duration::from_secs(2),
            held_probe_interval: Duration::from_secs(3600),
            park_delay: Duration::from_secs(60),
            max_snoozes: 5,
            max_depth: 5,
            header_prefix: outboxkit_core::signing::DEFAULT_HEADER_PREFIX.to_owned(),
            dormant_topics: Vec::new(),
            stats_deadline: Duration::from_millis(500),
            mail_timeout: None,
            mail_key_prefix: outboxkit_core::mail::DEFAULT_MAIL_KEY_PREFIX.to_owned(),
            endpoint_concurrency: None,
            endpoint_concurrency_overrides: BTreeMap::new(),
            forward_traceparent: false,
            breaker_threshold: Some(5),
            breaker_cooldown: Duration::from_secs(5),
            breaker_max_cooldown: Duration::from_secs(300),
        }
    }
}

fn between(field: &'static str, v: Duration, lo: Duration, hi: Duration) -> Result<()> {
    if v < lo || v > hi {
        return Err(Error::misconfigured(
            field,
            format!("must be between {lo:?} and {hi:?}"),
        ));
    }
    Ok(())
}

impl DispatcherConfig {
    /// Check every field; `Dispatcher::builder(..).build()` calls this.
    pub fn validate(&self) -> Result<()> {
        if !(1..=outboxkit_core::claim::MAX_BATCH).contains(&self.batch_size) {
            return Err(Error::misconfigured("batch_size", "must be from 1 to 1000"));
        }
        between(
            "lease",
            self.lease,
            Duration::from_secs(1),
            Duration::from_secs(24 * 3600),
        )?;
        between(
            "poll_interval",
            self.poll_interval,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )?;
        if !(1..=10_000).contains(&self.concurrency) {
            return Err(Error::misconfigured(
                "concurrency",
                "must be from 1 to 10000",
            ));
        }
        if !(1..=10_000).contains(&self.handler_concurrency) {
            return Err(Error::misconfigured(
                "handler_concurrency",
                "must be from 1 to 10000",
            ));
        }
        between(
            "shutdown_grace",
            self.shutdown_grace,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?;
        between(
            "webhook_timeout",
            self.webhook_timeout,
            Duration::from_millis(10),
            Duration::from_secs(600),
        )?;
        if self.webhook_timeout >= self.lease {
            return Err(Error::misconfigured(
                "lease",
                "must be longer than the webhook timeout",
            ));
        }
        between(
            "reservation_margin",
            self.reservation_margin,
            Duration::ZERO,
            Duration::from_secs(600),
        )?;
        between(
            "held_probe_interval",
            self.held_probe_interval,
            Duration::from_millis(1),
            Duration::from_secs(7 * 86_400),
        )?;
        between(
            "park_delay",
            self.park_delay,
            Duration::from_millis(1),
            Duration::from_secs(86_400),
        )?;
        if self.max_snoozes > 1000 {
            return Err(Error::misconfigured("max_snoozes", "must be at most 1000"));
        }
        if !(1..=100).contains(&self.max_depth) {
            return Err(Error::misconfigured("max_depth", "must be from 1 to 100"));
        }
        outboxkit_core::signing::HeaderNames::with_prefix(&self.header_prefix)?;
        between(
            "stats_deadline",
            self.stats_deadline,
            Duration::ZERO,
            Duration::from_secs(60),
        )?;
        if let Some(t) = self.mail_timeout {
            between(
                "mail_timeout",
                t,
                Duration::from_millis(10),
                Duration::from_secs(600),
            )?;
            if t >= self.lease {
                return Err(Error::misconfigured(
                    "mail_timeout",
                    "must be shorter than the lease",
                ));
            }
        }
        outboxkit_core::mail::check_mail_key_prefix(&self.mail_key_prefix)
            .map_err(|e| Error::misconfigured("mail_key_prefix", e.message().to_owned()))?;
        if self
            .endpoint_concurrency
            .is_some_and(|c| !(1..=10_000).contains(&c))
        {
            return Err(Error::misconfigured(
                "endpoint_concurrency",
                "must be from 1 to 10000",
            ));
        }
        if self
            .endpoint_concurrency_overrides
            .values()
            .any(|c| !(1..=10_000).contains(c))
        {
            return Err(Error::misconfigured(
                "endpoint_concurrency_overrides",
                "each must be from 1 to 10000",
            ));
        }
        if self
            .breaker_threshold
            .is_some_and(|t| !(1..=1000).contains(&t))
        {
            return Err(Error::misconfigured(
                "breaker_threshold",
                "must be from 1 to 1000",
            ));
        }
        between(
            "breaker_cooldown",
            self.breaker_cooldown,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )?;
        between(
            "breaker_max_cooldown",
            self.breaker_max_cooldown,
            self.breaker_cooldown,
            Duration::from_secs(24 * 3600),
        )?;
        Ok(())
    }

    /// The deadline of one e-mail send: `mail_timeout`, else `webhook_timeout`.
    pub fn mail_deadline(&self) -> Duration {
        self.mail_timeout.unwrap_or(self.webhook_timeout)
    }

    /// The most webhook requests in flight to `endpoint`: its override, else
    /// `endpoint_concurrency`, else a quarter of `concurrency` (at least 1).
    pub fn concurrency_for(&self, endpoint: EndpointId) -> usize {
        self.endpoint_concurrency_overrides
            .get(&endpoint)
            .copied()
            .unwrap_or_else(|| self.default_endpoint_concurrency())
    }

    /// The most webhook requests in flight to an endpoint without an override:
    /// `endpoint_concurrency`, else a quarter of `concurrency` (at least 1).
    pub fn default_endpoint_concurrency(&self) -> usize {
        self.endpoint_concurrency
            .unwrap_or((self.concurrency / 4).max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        DispatcherConfig::default().validate().unwrap();
    }

    #[test]
    fn the_endpoint_cap_defaults_to_a_quarter_of_the_concurrency() {
        let e = EndpointId::parse("01900000-0000-7000-8000-0000000000aa").unwrap();
        let other = EndpointId::parse("01900000-0000-7000-8000-0000000000bb").unwrap();
        let mut c = DispatcherConfig::default();
        assert_eq!(c.concurrency_for(e), 16);
        c.concurrency = 3;
        assert_eq!(c.concurrency_for(e), 1);
        c.endpoint_concurrency = Some(2);
        c.endpoint_concurrency_overrides.insert(e, 7);
        assert_eq!((c.concurrency_for(e), c.concurrency_for(other)), (7, 2));
    }

    #[test]
    fn bad_values_name_their_field() {
        type Mutate = Box<dyn Fn(&mut DispatcherConfig)>;
        let cases: Vec<(&str, Mutate)> = vec![
            ("batch_size", Box::new(|c| c.batch_size = 0)),
            ("batch_size", Box::new(|c| c.batch_size = 5000)),
            ("lease", Box::new(|c| c.lease = Duration::from_millis(1))),
            ("lease", Box::new(|c| c.lease = Duration::from_secs(5))),
            (
                "poll_interval",
                Box::new(|c| c.poll_interval = Duration::ZERO),
            ),
            ("concurrency", Box::new(|c| c.concurrency = 0)),
            (
                "handler_concurrency",
                Box::new(|c| c.handler_concurrency = 0),
            ),
            ("max_depth", Box::new(|c| c.max_depth = 0)),
            (
                "header_prefix",
                Box::new(|c| c.header_prefix = "Bad Prefix".into()),
            ),
            (
                "held_probe_interval",
                Box::new(|c| c.held_probe_interval = Duration::ZERO),
            ),
            (
                "mail_timeout",
                Box::new(|c| c.mail_timeout = Some(Duration::from_secs(50))),
            ),
            (
                "mail_key_prefix",
                Box::new(|c| c.mail_key_prefix = "two words".into()),
            ),
            (
                "breaker_threshold",
                Box::new(|c| c.breaker_threshold = Some(0)),
            ),
            (
                "breaker_max_cooldown",
                Box::new(|c| c.breaker_max_cooldown = Duration::from_millis(10)),
            ),
        ];
        for (field, mutate) in cases {
            let mut c = DispatcherConfig::default();
            mutate(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(e.field(), Some(field), "{e}");
            assert_eq!(e.kind(), crate::ErrorKind::Misconfigured);
        }
    }
}
