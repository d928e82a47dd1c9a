//! The JSON documents of the API: stable field names, ids as strings, times as RFC 3339
//! (UTC, milliseconds). Nothing secret: no signing secret (except the one answer that
//! creates or rotates it), no e-mail recipient, no URL query string or userinfo.

use outboxkit_core::{Delivery, Destination, Endpoint, EndpointUrl, Stats, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

mod attempt;
pub use attempt::{
    AttemptDetailView, AttemptView, DeliveryDetail, PayloadRef, PayloadView, TimingView, WireHeader,
};

fn time(t: Timestamp) -> String {
    t.to_rfc3339()
}

/// The URL as shown: without userinfo, and with the query string replaced by `?…`.
pub fn display_url(url: &EndpointUrl) -> String {
    let u = url.url();
    let mut out = format!("{}://", u.scheme());
    if let Some(host) = u.host_str() {
        out.push_str(host);
    }
    if let Some(port) = u.port() {
        out.push_str(&format!(":{port}"));
    }
    out.push_str(u.path());
    if u.query().is_some() {
        out.push_str("?…");
    }
    out
}

/// A webhook endpoint.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointView {
    /// The id.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The URL without query string or userinfo.
    pub url: String,
    /// Free text.
    pub description: String,
    /// `*` or a comma-separated list of topics and `prefix.*` patterns.
    pub filter: String,
    /// `active`, `paused` or `disabled`.
    pub status: String,
    /// Why it is disabled (`manual`, `gone`).
    pub disabled_reason: Option<String>,
    /// `envelope` or `raw`.
    pub body_format: String,
    /// Deliveries per second, if limited.
    pub rate_limit: Option<u32>,
    /// Strict FIFO: its deliveries go one at a time in enqueue order, across ordering keys.
    pub fifo: bool,
    /// Whether a previous secret still signs.
    pub rotation_in_progress: bool,
    /// Custom headers sent with every request to it; a secret value is `null`.
    pub headers: Vec<HeaderView>,
    /// The last attempt to it.
    pub last_delivery: Option<LastDeliveryView>,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

/// A custom header of an endpoint as shown: a secret value is never returned.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HeaderView {
    /// The name, lowercase.
    pub name: String,
    /// The value; `null` when secret.
    pub value: Option<String>,
    /// Whether the value is sealed.
    pub secret: bool,
}

/// A custom header to set: sent with every request to the endpoint. The name is an HTTP
/// token that neither HTTP (`host`, `content-*`, hop-by-hop names) nor outbox (`webhook-*`,
/// `user-agent`, `traceparent`) sets; the value visible ASCII, at most 4 KiB.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeaderBody {
    /// The name (any case; stored lowercase).
    pub name: String,
    /// The value.
    pub value: String,
    /// Seal the value with the vault: it is never returned (default false).
    #[serde(default)]
    pub secret: bool,
}

impl std::fmt::Debug for HeaderBody {
    // The value stays out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeaderBody({}, secret: {})", self.name, self.secret)
    }
}

impl From<HeaderBody> for outboxkit_core::HeaderInput {
    fn from(h: HeaderBody) -> Self {
        outboxkit_core::HeaderInput {
            name: h.name,
            value: h.value,
            secret: h.secret,
        }
    }
}

/// The last attempt to an endpoint.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LastDeliveryView {
    /// `succeeded` or an error class.
    pub outcome: String,
    /// The HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// When the attempt finished.
    pub at: String,
}

impl From<&Endpoint> for EndpointView {
    fn from(e: &Endpoint) -> Self {
        EndpointView {
            id: e.id.to_string(),
            tenant: e.tenant.to_string(),
            url: display_url(&e.url),
            description: e.description.clone(),
            filter: e.filter.to_string(),
            status: e.status.as_str().to_owned(),
            disabled_reason: e.status.reason().map(|r| r.as_str().to_owned()),
            body_format: e.body_format.as_str().to_owned(),
            rate_limit: e.rate_limit,
            fifo: e.fifo,
            rotation_in_progress: e.previous_secret.is_some(),
            headers: e
                .headers
                .iter()
                .map(|h| HeaderView {
                    name: h.name.clone(),
                    value: h.value.plain().map(str::to_owned),
                    secret: h.value.is_secret(),
                })
                .collect(),
            last_delivery: e.last_delivery.as_ref().map(|l| LastDeliveryView {
                outcome: l.outcome.as_str().to_owned(),
                status_code: l.status_code,
                at: time(l.at),
            }),
            created_at: time(e.created_at),
            updated_at: time(e.updated_at),
        }
    }
}

/// Endpoints of a tenant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointList {
    /// Oldest first.
    pub endpoints: Vec<EndpointView>,
}

/// An endpoint with its signing secret, shown this once.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EndpointWithSecret {
    /// The endpoint.
    pub endpoint: EndpointView,
    /// The `whsec_…` secret: store it now, it is not shown again.
    pub secret: String,
}

/// A new endpoint.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpointBody {
    /// Where deliveries go.
    pub url: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// `*` (default) or a comma-separated list of topics and `prefix.*` patterns.
    #[serde(default)]
    pub filter: String,
    /// `envelope` (default) or `raw`.
    pub body_format: Option<String>,
    /// Deliveries per second.
    pub rate_limit: Option<u32>,
    /// Strict FIFO (default false): deliveries one at a time in enqueue order, across
    /// ordering keys; a retried or held delivery holds everything behind it.
    #[serde(default)]
    pub fifo: bool,
    /// A `whsec_…` secret to use instead of a generated one.
    pub secret: Option<String>,
    /// Custom headers (at most 20).
    #[serde(default)]
    pub headers: Vec<HeaderBody>,
}

/// A message to enqueue (`POST /v1/tenants/{tenant}/messages`). The idempotency key is the
/// `Idempotency-Key` header, the tenant the path's.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewMessageBody {
    /// The topic (lowercase dotted, e.g. `order.created`).
    pub topic: String,
    /// The payload: any JSON value, stored and delivered byte for byte as sent (whitespace,
    /// key order, large numbers and all), at most the store's payload limit (256 KiB by
    /// default).
    #[schema(value_type = Object)]
    pub payload: Box<serde_json::value::RawValue>,
    /// Deliveries with the same ordering key to the same destination go in order.
    pub ordering_key: Option<String>,
    /// Deliver no earlier than this: RFC 3339 (`2026-12-03T10:00:00Z`) or Unix
    /// milliseconds, at most the store's delay limit (365 days) ahead. A time more than a
    /// minute in the past (the clock skew allowed) is refused; within that minute it means
    /// now. Not together with `delay`.
    #[schema(value_type = Option<String>, example = "2026-12-24T00:00:00Z")]
    pub available_at: Option<serde_json::Value>,
    /// Deliver no earlier than this long after the enqueue: a duration (`"10m"`, `"1h30m"`,
    /// `"2d"`, `"500ms"`; digits alone are seconds) or a whole number of seconds, at most the
    /// store's delay limit (365 days). Negative or unparsable is refused. Not together with
    /// `available_at`.
    #[schema(value_type = Option<String>, example = "10m")]
    pub delay: Option<serde_json::Value>,
    /// Headers carried to handlers (never sent to webhooks), by name; at most 64. A W3C
    /// `traceparent` here, or else on the request, joins the deliveries to the caller's
    /// trace.
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Also deliver by e-mail to these recipients (at most 100).
    #[serde(default)]
    pub email: Vec<String>,
}

/// What an enqueue wrote: 201 for a new message, 200 for a duplicate of an earlier one with
/// the same `Idempotency-Key` (nothing written; its id).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EnqueuedView {
    /// The message's id (the earlier message's, for a duplicate).
    pub message_id: String,
    /// The deliveries written: one per matching consumer, endpoint and e-mail recipient
    /// (0 for a duplicate).
    pub deliveries: u32,
    /// Whether an earlier message had this tenant, topic and idempotency key.
    pub duplicate: bool,
}

/// A change to an endpoint; absent fields stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    /// A new URL (releases held deliveries).
    pub url: Option<String>,
    /// A new description.
    pub description: Option<String>,
    /// A new filter.
    pub filter: Option<String>,
    /// `envelope` or `raw`.
    pub body_format: Option<String>,
    /// A new rate limit; `0` removes it.
    pub rate_limit: Option<u32>,
    /// Strict FIFO on or off (applies to deliveries enqueued afterwards).
    pub fifo: Option<bool>,
    /// Replace every custom header with these (`[]` removes them all); applied first.
    pub headers: Option<Vec<HeaderBody>>,
    /// Remove these custom headers (by name, any case; each must exist); applied second.
    #[serde(default)]
    pub remove_headers: Vec<String>,
    /// Set these custom headers (one of the same name is replaced, a new one added);
    /// applied last.
    #[serde(default)]
    pub set_headers: Vec<HeaderBody>,
}

/// A rotation.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// A `whsec_…` secret to use instead of a generated one.
    pub secret: Option<String>,
    /// Rotate although a rotation is in progress: the oldest secret stops signing at once,
    /// so receivers still verifying with it start failing (default false: 409).
    #[serde(default)]
    pub force: bool,
}

/// The answer of a test event.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TestResult {
    /// Whether the receiver answered.
    pub answered: bool,
    /// Its HTTP status.
    pub status_code: Option<u16>,
    /// The start of its body.
    pub excerpt: Option<String>,
    /// The error class when it did not answer.
    pub error_class: Option<String>,
}

/// How many deliveries a call changed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Changed {
    /// The count.
    pub changed: u64,
}

/// What cancelling a message did to its deliveries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CancelledView {
    /// Deliveries that were pending or held and are now dead (`cancelled`).
    pub cancelled: u64,
    /// Deliveries left alone: in flight (`processing`, `sending`) or already finished.
    pub skipped: u64,
}

/// The last outcome of a delivery.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LastOutcomeView {
    /// `succeeded` or an error class.
    pub outcome: String,
    /// The HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// The start of the answer (at most 300 bytes).
    pub excerpt: Option<String>,
    /// When.
    pub at: String,
}

/// Where a delivery goes. The e-mail recipient is never shown (`target` is null).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DestinationView {
    /// `handler`, `webhook` or `email`.
    pub kind: String,
    /// The consumer or the endpoint id.
    pub target: Option<String>,
}

/// A delivery.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// The id (the `webhook-id`).
    pub id: String,
    /// The message.
    pub message_id: String,
    /// The tenant.
    pub tenant: String,
    /// The topic.
    pub topic: String,
    /// The ordering key.
    pub ordering_key: Option<String>,
    /// Where it goes.
    pub destination: DestinationView,
    /// `pending`, `processing`, `sending`, `succeeded`, `held` or `dead`.
    pub status: String,
    /// Attempts spent.
    pub attempts: u32,
    /// The run (1, plus one per replay).
    pub run: u32,
    /// When it is next due.
    pub next_attempt_at: String,
    /// The last attempt's outcome.
    pub last_outcome: Option<LastOutcomeView>,
    /// Why it is dead.
    pub dead_reason: Option<String>,
    /// When it was created.
    pub created_at: String,
    /// When it finished.
    pub completed_at: Option<String>,
}

impl From<&Delivery> for DeliveryView {
    fn from(d: &Delivery) -> Self {
        let target = match &d.destination {
            Destination::Email(_) => None,
            other => Some(other.target()),
        };
        DeliveryView {
            id: d.id.to_string(),
            message_id: d.message_id.to_string(),
            tenant: d.tenant.to_string(),
            topic: d.topic.to_string(),
            ordering_key: d.ordering_key.as_ref().map(ToString::to_string),
            destination: DestinationView {
                kind: d.destination.kind().as_str().to_owned(),
                target,
            },
            status: d.status.as_str().to_owned(),
            attempts: d.attempts,
            run: d.run,
            next_attempt_at: time(d.next_attempt_at),
            last_outcome: d.last_outcome.as_ref().map(|l| LastOutcomeView {
                outcome: l.outcome.as_str().to_owned(),
                status_code: l.status_code,
                excerpt: l.excerpt.clone(),
                at: time(l.at),
            }),
            dead_reason: d.dead_reason.map(|r| r.as_str().to_owned()),
            created_at: time(d.created_at),
            completed_at: d.completed_at.map(time),
        }
    }
}

/// A page of deliveries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryPage {
    /// Newest first.
    pub deliveries: Vec<DeliveryView>,
    /// Pass as `cursor` for the next page; null at the end.
    pub next_cursor: Option<String>,
}

/// Filters of a delivery listing (every given one must match).
#[derive(Clone, Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// A status.
    pub status: Option<String>,
    /// An endpoint id.
    pub endpoint: Option<String>,
    /// `handler`, `webhook` or `email`.
    pub kind: Option<String>,
    /// A topic.
    pub topic: Option<String>,
    /// Created at or after (RFC 3339 or Unix milliseconds).
    pub since: Option<String>,
    /// Created before (RFC 3339 or Unix milliseconds).
    pub until: Option<String>,
    /// Text in a stored answer excerpt (1–200 bytes).
    pub text: Option<String>,
    /// Page size, 1–1000 (default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Which bulk operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Replay dead deliveries.
    Replay,
    /// Make pending or held deliveries due now.
    Retry,
    /// Give held deliveries a fresh budget.
    Reset,
    /// Cancel pending or held deliveries before they are sent (dead: `cancelled`).
    Cancel,
}

/// A bulk operation over every delivery that matches a filter.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// What to do.
    pub action: BulkAction,
    /// Which deliveries (`limit` and `cursor` are not allowed here).
    #[serde(default)]
    pub filter: BulkFilter,
    /// Report what would change, change nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// At most this many deliveries (1–1000, default 100).
    pub max: Option<u32>,
}

/// The filter of a bulk operation.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    /// A status (default: the one the action applies to).
    pub status: Option<String>,
    /// An endpoint id.
    pub endpoint: Option<String>,
    /// `handler`, `webhook` or `email`.
    pub kind: Option<String>,
    /// A topic.
    pub topic: Option<String>,
    /// Created at or after.
    pub since: Option<String>,
    /// Created before.
    pub until: Option<String>,
}

/// What a bulk operation did (or, dry, would do).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BulkResult {
    /// The action.
    pub action: BulkAction,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// The deliveries that matched.
    pub matched: Vec<String>,
    /// How many were changed.
    pub changed: u64,
    /// Those that could not be changed (changed meanwhile), with why.
    pub skipped: Vec<Skipped>,
}

/// A delivery a bulk operation left alone.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Skipped {
    /// Its id.
    pub id: String,
    /// Why.
    pub reason: String,
}

/// Delivery counts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StatsView {
    /// Pending.
    pub pending: u64,
    /// Processing.
    pub processing: u64,
    /// Sending.
    pub sending: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Held.
    pub held: u64,
    /// Dead.
    pub dead: u64,
    /// All.
    pub total: u64,
    /// The oldest due delivery's due time.
    pub oldest_due_at: Option<String>,
    /// How long it has been due.
    pub oldest_due_age_ms: Option<u64>,
}

impl From<&Stats> for StatsView {
    fn from(s: &Stats) -> Self {
        StatsView {
            pending: s.pending,
            processing: s.processing,
            sending: s.sending,
            succeeded: s.succeeded,
            held: s.held,
            dead: s.dead,
            total: s.total(),
            oldest_due_at: s.oldest_due_at.map(time),
            oldest_due_age_ms: s
                .oldest_due_age
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

/// Liveness and the store's reachability.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` or `unavailable`.
    pub status: String,
}
