//! What an attempt turns into: one pure function from (outcome, attempt,
//! policy) to a [`Verdict`]. It never reads a clock or a random source: the current time and
//! the jitter sample come in as arguments.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::broker::BrokerFailure;
use crate::mail::{may_retry, MailError, MailErrorCode, MailOutcome};
use crate::model::{AttemptOutcome, DeadReason, ErrorClass};
use crate::retry::RetryPolicy;
use crate::time::Timestamp;

/// What a handler returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandlerOutcome {
    /// Done.
    Ok,
    /// Failed; try again after the policy's delay.
    Retry,
    /// The handler ran past its timeout.
    Timeout,
    /// The downstream is out, the message is fine: try again after this delay without
    /// spending an attempt (at most `max_snoozes` times).
    Snooze(Duration),
    /// Permanent failure: dead at once.
    Discard,
}

/// What one attempt produced, channel by channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An in-process handler's result.
    Handler(HandlerOutcome),
    /// A webhook (or HTTP) answer: the status and the raw `Retry-After` header.
    Http {
        /// The status code.
        status: u16,
        /// The `Retry-After` header as received (seconds or an HTTP date).
        retry_after: Option<String>,
    },
    /// No answer: `timeout`, `network`, `dns` or `egress-refused`.
    Transport(ErrorClass),
    /// The mailer's answer.
    Mail(Result<(), MailError>),
    /// The broker's answer: acknowledged, or why not.
    Broker(Result<(), BrokerFailure>),
    /// The webhook endpoint no longer exists.
    EndpointMissing,
    /// The webhook endpoint is paused.
    EndpointPaused,
    /// The webhook endpoint is disabled.
    EndpointDisabled,
    /// The message cannot be rendered for its channel (e.g. an e-mail without a subject).
    Unrenderable,
}

impl From<&crate::broker::BrokerResponse> for Outcome {
    /// The classification input of a publish's answer.
    fn from(response: &crate::broker::BrokerResponse) -> Self {
        Outcome::Broker(response.failure().map_or(Ok(()), Err))
    }
}

impl Outcome {
    /// What the ledger records for this outcome, or `None` when nothing was tried
    /// (the endpoint was missing, paused or disabled).
    pub fn attempt_outcome(&self) -> Option<AttemptOutcome> {
        use AttemptOutcome::{Failed, Succeeded};
        Some(match self {
            Outcome::Handler(h) => match h {
                HandlerOutcome::Ok => Succeeded,
                HandlerOutcome::Retry => Failed(ErrorClass::HandlerError),
                HandlerOutcome::Timeout => Failed(ErrorClass::Timeout),
                HandlerOutcome::Snooze(_) => Failed(ErrorClass::Snoozed),
                HandlerOutcome::Discard => Failed(ErrorClass::Discarded),
            },
            Outcome::Http { status, .. } => match status {
                200..=299 => Succeeded,
                300..=399 => Failed(ErrorClass::Redirect),
                400..=499 => Failed(ErrorClass::Response4xx),
                _ => Failed(ErrorClass::Response5xx),
            },
            Outcome::Transport(class) => Failed(*class),
            Outcome::Mail(Ok(())) => Succeeded,
            Outcome::Mail(Err(e)) => Failed(match (e.code, e.outcome) {
                (MailErrorCode::MessageRefused | MailErrorCode::ConfigurationRefused, _) => {
                    ErrorClass::MailRefused
                }
                (_, MailOutcome::NotSent) => ErrorClass::MailNotSent,
                (_, MailOutcome::Unknown) => ErrorClass::MailUnknown,
            }),
            Outcome::Broker(Ok(())) => Succeeded,
            Outcome::Broker(Err(f)) => Failed(f.class()),
            Outcome::Unrenderable => Failed(ErrorClass::Unrenderable),
            Outcome::EndpointMissing | Outcome::EndpointPaused | Outcome::EndpointDisabled => {
                return None
            }
        })
    }

    /// The HTTP status, when there is one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Outcome::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What the store does with a claimed delivery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Verdict {
    /// Delivered: `succeeded`.
    Succeeded,
    /// Back to `pending`, due at `at`; the attempt stays spent.
    Retry {
        /// When it is due again.
        at: Timestamp,
    },
    /// `held` until `probe_at` (401/403). The attempt that first meets it stays spent;
    /// probes are free.
    Held {
        /// When it is probed next.
        probe_at: Timestamp,
    },
    /// `dead`. Refunds the attempt when nothing was tried ([`DeadReason::refunds_attempt`]).
    /// [`DeadReason::Gone`] also disables the endpoint.
    Dead {
        /// Why.
        reason: DeadReason,
    },
    /// Back to `pending` at `until`, the attempt refunded, `snoozes + 1`.
    Snoozed {
        /// When it is due again.
        until: Timestamp,
    },
    /// Back to `pending` at `until`, the attempt refunded (our configuration, e.g. a secret
    /// that does not open).
    Parked {
        /// When it is due again.
        until: Timestamp,
    },
    /// `held` for its endpoint (paused or disabled) until `until`, the attempt refunded:
    /// not probed, made `pending` again when the endpoint is resumed or re-enabled
    /// ([`crate::EndpointUpdate::releases_held`]). `until` is [`Timestamp::MAX`] for a paused
    /// endpoint and the end of [`crate::endpoint::DISABLED_HOLD`] for a disabled one.
    AwaitEndpoint {
        /// When the wait ends (a disabled endpoint's hold expires then).
        until: Timestamp,
    },
}

impl Verdict {
    /// When the delivery is due again: `None` for the terminal verdicts (succeeded, dead).
    pub fn due(&self) -> Option<Timestamp> {
        match self {
            Verdict::Succeeded | Verdict::Dead { .. } => None,
            Verdict::Retry { at: due }
            | Verdict::Held { probe_at: due }
            | Verdict::Snoozed { until: due }
            | Verdict::Parked { until: due }
            | Verdict::AwaitEndpoint { until: due } => Some(*due),
        }
    }

    /// A short name for counters and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Retry { .. } => "retry",
            Verdict::Held { .. } => "held",
            Verdict::Dead { .. } => "dead",
            Verdict::Snoozed { .. } => "snoozed",
            Verdict::Parked { .. } => "parked",
            Verdict::AwaitEndpoint { .. } => "await-endpoint",
        }
    }

    /// Whether the claim's attempt is given back.
    pub fn refunds_attempt(&self) -> bool {
        match self {
            Verdict::Snoozed { .. } | Verdict::Parked { .. } | Verdict::AwaitEndpoint { .. } => {
                true
            }
            Verdict::Dead { reason } => reason.refunds_attempt(),
            _ => false,
        }
    }
}

/// The knobs of classification besides the retry policy.
#[derive(Clone, Debug, PartialEq)]
pub struct VerdictPolicy {
    /// The tenant's retry policy for this channel.
    pub retry: RetryPolicy,
    /// How often a held delivery is probed. Default 1 h.
    pub held_probe_interval: Duration,
    /// How long a delivery is parked when our own configuration fails (a secret that does
    /// not open). Default 60 s.
    pub park_delay: Duration,
    /// How many snoozes a delivery may take before a snooze counts as a retry. Default 5.
    pub max_snoozes: u32,
    /// The longest `Retry-After` (and snooze) honoured. Default 24 h.
    pub max_retry_after: Duration,
    /// Whether the mailer deduplicates by idempotency key (an `Unknown` outcome may then be
    /// retried).
    pub mail_idempotent: bool,
}

impl VerdictPolicy {
    /// The defaults around `retry`.
    pub fn new(retry: RetryPolicy) -> Self {
        VerdictPolicy {
            retry,
            held_probe_interval: Duration::from_secs(3600),
            park_delay: Duration::from_secs(60),
            max_snoozes: 5,
            max_retry_after: Duration::from_secs(24 * 3600),
            mail_idempotent: false,
        }
    }
}

/// Where the delivery stands when its attempt finishes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttemptContext {
    /// Attempts spent, this one included (as set by the claim).
    pub attempt: u32,
    /// Snoozes taken before this attempt.
    pub snoozes: u32,
    /// Whether this attempt probes a held delivery (it spent nothing).
    pub probe: bool,
    /// The current time.
    pub now: Timestamp,
    /// A uniform sample in `[0, 1)` for jitter.
    pub jitter: f64,
}

/// Parse a `Retry-After` value: delay-seconds or an HTTP date (relative to `now`).
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(
            v.parse::<u64>().unwrap_or(u64::MAX / 1000),
        ));
    }
    Timestamp::parse_http_date(v).map(|t| t.duration_since(now))
}

/// Classify one attempt. Every row of the verdict table is one arm here.
pub fn classify(outcome: &Outcome, ctx: &AttemptContext, policy: &VerdictPolicy) -> Verdict {
    let now = ctx.now;
    let retry = |hint: Option<Duration>| -> Verdict {
        match policy.retry.delay(ctx.attempt, ctx.jitter) {
            None => Verdict::Dead {
                reason: DeadReason::MaxAttempts,
            },
            Some(d) => {
                let d = match hint {
                    Some(h) => h.min(policy.max_retry_after).max(d),
                    None => d,
                };
                Verdict::Retry {
                    at: now.saturating_add(d),
                }
            }
        }
    };
    let held = |after: Duration| Verdict::Held {
        probe_at: now.saturating_add(after),
    };

    // Waiting for the endpoint: not probed, released by a resume or re-enable. A paused
    // endpoint's wait never ends by itself; a disabled one's expires after DISABLED_HOLD.
    let await_endpoint = |until: Timestamp| Verdict::AwaitEndpoint { until };

    // A probe of a held delivery: a 2xx releases it, a 410 kills it, a 401/403 keeps it held;
    // anything else (5xx, timeout, other 4xx) returns it to the ordinary retry schedule
    // below. A probe that finds its endpoint disabled is a hold that expired.
    if ctx.probe {
        match outcome {
            Outcome::Http {
                status: 401 | 403, ..
            } => return held(policy.held_probe_interval),
            Outcome::EndpointDisabled => {
                return Verdict::Dead {
                    reason: DeadReason::EndpointDisabled,
                }
            }
            _ => {}
        }
    }

    match outcome {
        Outcome::Handler(h) => match h {
            HandlerOutcome::Ok => Verdict::Succeeded,
            HandlerOutcome::Retry | HandlerOutcome::Timeout => retry(None),
            HandlerOutcome::Snooze(d) if ctx.snoozes < policy.max_snoozes => Verdict::Snoozed {
                until: now.saturating_add((*d).min(policy.max_retry_after)),
            },
            HandlerOutcome::Snooze(d) => retry(Some(*d)),
            HandlerOutcome::Discard => Verdict::Dead {
                reason: DeadReason::Permanent,
            },
        },
        Outcome::Http {
            status,
            retry_after,
        } => match status {
            200..=299 => Verdict::Succeeded,
            401 | 403 => held(policy.held_probe_interval),
            410 => Verdict::Dead {
                reason: DeadReason::Gone,
            },
            408 | 425 | 429 | 500..=599 => retry(
                retry_after
                    .as_deref()
                    .and_then(|v| parse_retry_after(v, now)),
            ),
            _ => retry(None),
        },
        Outcome::Transport(_) => retry(None),
        Outcome::Mail(Ok(())) => Verdict::Succeeded,
        Outcome::Mail(Err(e)) => {
            if may_retry(e, policy.mail_idempotent) {
                retry(None)
            } else if e.outcome == MailOutcome::Unknown && !e.code.is_refusal() {
                Verdict::Dead {
                    reason: DeadReason::UnknownOutcome,
                }
            } else {
                Verdict::Dead {
                    reason: DeadReason::MailRefused,
                }
            }
        }
        // The broker channel: only an acknowledgement succeeds; what may pass by itself is
        // retried on the schedule; a refusal of the sink's configuration (no stream, no
        // route, no permission) is held and probed, like a webhook's 401/403, because the
        // fix is on the broker or in the sink, not in the message; a refusal of the message
        // itself is permanent.
        Outcome::Broker(Ok(())) => Verdict::Succeeded,
        Outcome::Broker(Err(f)) => match f {
            BrokerFailure::Timeout | BrokerFailure::Connection | BrokerFailure::Unavailable => {
                retry(None)
            }
            BrokerFailure::NoRoute | BrokerFailure::PermissionDenied => {
                held(policy.held_probe_interval)
            }
            BrokerFailure::Rejected => Verdict::Dead {
                reason: DeadReason::Permanent,
            },
        },
        Outcome::EndpointMissing => Verdict::Dead {
            reason: DeadReason::EndpointRemoved,
        },
        Outcome::EndpointPaused => await_endpoint(Timestamp::MAX),
        Outcome::EndpointDisabled => {
            await_endpoint(now.saturating_add(crate::endpoint::DISABLED_HOLD))
        }
        Outcome::Unrenderable => Verdict::Dead {
            reason: DeadReason::Unrenderable,
        },
    }
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
