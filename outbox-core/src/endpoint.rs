//! Webhook endpoints and in-process consumers: the subscriptions that fan-out reads.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::endpoint_headers::{
    check_headers, merge_headers, CustomHeader, HeaderInput, HeaderValue,
};
use crate::error::{Error, Result};
use crate::ids::{ConsumerName, EndpointId, TenantId, Topic, TopicFilter};
use crate::model::{AttemptOutcome, AttemptRecord};
pub use crate::sealed::SealedSecret;
use crate::time::Timestamp;

/// A syntactically valid webhook URL: `http` or `https`, a host, no credentials, no
/// fragment, at most 2048 bytes. Whether `http` or the address is acceptable is the egress
/// policy's decision at delivery time (and the CLI's at creation).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EndpointUrl(url::Url);

impl EndpointUrl {
    /// The longest URL stored, in bytes, measured after normalisation (percent-encoding,
    /// IDNA, dot segments): what [`EndpointUrl::as_str`] returns.
    pub const MAX_LEN: usize = 2048;

    /// Parse, normalise and check. The length limit applies to the normalised URL, the one
    /// that is stored and read back (`https://a.example/` followed by 1,000 `é` is 2,018
    /// bytes as typed but 6,018 once percent-encoded, and is refused). Input longer than
    /// four times the limit is refused without parsing.
    pub fn parse(s: &str) -> Result<Self> {
        let too_long = || {
            Error::invalid_input(
                "url",
                format!(
                    "must be at most {} bytes once normalised (percent-encoded)",
                    Self::MAX_LEN
                ),
            )
        };
        if s.len() > 4 * Self::MAX_LEN {
            return Err(too_long());
        }
        let u = url::Url::parse(s.trim())
            .map_err(|_| Error::invalid_input("url", "is not a valid URL"))?;
        if u.as_str().len() > Self::MAX_LEN {
            return Err(too_long());
        }
        // What is stored must parse back to itself, or the endpoint could be written but
        // never read.
        if url::Url::parse(u.as_str()).ok().as_ref() != Some(&u) {
            return Err(Error::invalid_input(
                "url",
                "does not normalise to a stable form",
            ));
        }
        if u.scheme() != "https" && u.scheme() != "http" {
            return Err(Error::invalid_input(
                "url",
                "must use https (or http where allowed)",
            ));
        }
        if u.host_str().is_none_or(str::is_empty) {
            return Err(Error::invalid_input("url", "must name a host"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(Error::invalid_input("url", "must not contain credentials"));
        }
        if u.fragment().is_some() {
            return Err(Error::invalid_input("url", "must not contain a fragment"));
        }
        Ok(EndpointUrl(u))
    }

    /// The URL text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        self.0.scheme()
    }

    /// The host as written (a name or an IP literal, IPv6 without brackets).
    pub fn host(&self) -> String {
        match self.0.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => String::new(),
        }
    }

    /// The port, explicit or the scheme's default.
    pub fn port(&self) -> u16 {
        self.0.port_or_known_default().unwrap_or(443)
    }

    /// The parsed URL.
    pub fn url(&self) -> &url::Url {
        &self.0
    }

    /// The parsed URL, taken out (no copy).
    pub fn into_url(self) -> url::Url {
        self.0
    }
}

impl fmt::Display for EndpointUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl fmt::Debug for EndpointUrl {
    // URLs may carry tokens in their path or query; keep them out of debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EndpointUrl({}://{}/…)", self.0.scheme(), self.host())
    }
}

impl TryFrom<String> for EndpointUrl {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::parse(&s)
    }
}

impl From<EndpointUrl> for String {
    fn from(u: EndpointUrl) -> String {
        u.0.into()
    }
}

/// Decides, before anything is written, whether an endpoint may point at a URL.
///
/// # Contract
/// - A refusal MUST be `InvalidInput` naming the field `url`, without the URL in the message.
#[async_trait::async_trait]
pub trait UrlPolicy: Send + Sync + fmt::Debug + 'static {
    /// `Ok` when `url` is acceptable.
    async fn check(&self, url: &EndpointUrl) -> Result<()>;
}

/// The default of [`crate::EndpointAdmin`]: `https` only. Private and metadata addresses
/// are refused at every delivery by the transport's egress policy; to refuse them at
/// creation too, use `outboxkit_http::EgressPolicy` as the admin's policy.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpsOnly;

#[async_trait::async_trait]
impl UrlPolicy for HttpsOnly {
    async fn check(&self, url: &EndpointUrl) -> Result<()> {
        if url.scheme() == "https" {
            Ok(())
        } else {
            Err(Error::invalid_input("url", "must use https"))
        }
    }
}

/// Accepts every syntactically valid URL: for tests and local demos with loopback
/// receivers.
#[derive(Clone, Copy, Debug, Default)]
pub struct AnyUrl;

#[async_trait::async_trait]
impl UrlPolicy for AnyUrl {
    async fn check(&self, _url: &EndpointUrl) -> Result<()> {
        Ok(())
    }
}

/// How long deliveries wait for a disabled endpoint before they die as
/// `endpoint-disabled` (7 days): long enough to fix a receiver and re-enable it without a
/// replay, short enough that a forgotten endpoint does not keep its queue for good.
pub const DISABLED_HOLD: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// An endpoint's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", content = "reason", rename_all = "lowercase")]
pub enum EndpointStatus {
    /// Receives deliveries.
    Active,
    /// Holds its queue: new and waiting deliveries are `held` for the endpoint, never
    /// claimed and spending nothing, until it is resumed; then they go out in order.
    Paused,
    /// Sends nothing; new and waiting deliveries are `held` for the endpoint until it is
    /// re-enabled, each for at most [`DISABLED_HOLD`], then dead (`endpoint-disabled`).
    Disabled(DisabledReason),
}

impl EndpointStatus {
    /// `active`, `paused` or `disabled`.
    pub fn as_str(&self) -> &'static str {
        match self {
            EndpointStatus::Active => "active",
            EndpointStatus::Paused => "paused",
            EndpointStatus::Disabled(_) => "disabled",
        }
    }

    /// Rebuild from the stored `(status, reason)`.
    pub fn from_parts(status: &str, reason: Option<&str>) -> Result<Self> {
        match status {
            "active" => Ok(EndpointStatus::Active),
            "paused" => Ok(EndpointStatus::Paused),
            "disabled" => Ok(EndpointStatus::Disabled(DisabledReason::parse(
                reason.unwrap_or("manual"),
            )?)),
            _ => Err(Error::invalid_input("status", "unknown endpoint status")),
        }
    }

    /// Until when a delivery to an endpoint in this status waits, from `now`: `None` when
    /// active (it goes out), [`Timestamp::MAX`] when paused (until resumed), `now +`
    /// [`DISABLED_HOLD`] when disabled.
    pub fn hold_until(&self, now: Timestamp) -> Option<Timestamp> {
        match self {
            EndpointStatus::Active => None,
            EndpointStatus::Paused => Some(Timestamp::MAX),
            EndpointStatus::Disabled(_) => Some(now.saturating_add(DISABLED_HOLD)),
        }
    }

    /// The disabled reason, when disabled.
    pub fn reason(&self) -> Option<DisabledReason> {
        match self {
            EndpointStatus::Disabled(r) => Some(*r),
            _ => None,
        }
    }
}

/// Why an endpoint is disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DisabledReason {
    /// An operator disabled it.
    Manual,
    /// It answered 410 Gone.
    Gone,
}

impl DisabledReason {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            DisabledReason::Manual => "manual",
            DisabledReason::Gone => "gone",
        }
    }

    /// Parse [`DisabledReason::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "manual" => Ok(DisabledReason::Manual),
            "gone" => Ok(DisabledReason::Gone),
            _ => Err(Error::invalid_input("reason", "unknown disabled reason")),
        }
    }
}

/// How a webhook body is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    /// `{"type", "timestamp", "data"}` (the default).
    #[default]
    Envelope,
    /// The payload bytes as enqueued.
    Raw,
}

impl BodyFormat {
    /// `envelope` or `raw`.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyFormat::Envelope => "envelope",
            BodyFormat::Raw => "raw",
        }
    }

    /// Parse [`BodyFormat::as_str`].
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "envelope" => Ok(BodyFormat::Envelope),
            "raw" => Ok(BodyFormat::Raw),
            _ => Err(Error::invalid_input(
                "body_format",
                "must be `envelope` or `raw`",
            )),
        }
    }
}

/// A webhook subscription.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Its id.
    pub id: EndpointId,
    /// Its tenant: only that tenant's messages fan out to it.
    pub tenant: TenantId,
    /// Where deliveries go.
    pub url: EndpointUrl,
    /// Free text for operators (at most 500 characters).
    pub description: String,
    /// Which topics it receives.
    pub filter: TopicFilter,
    /// Active, paused or disabled.
    pub status: EndpointStatus,
    /// The current signing secret, sealed.
    pub secret: SealedSecret,
    /// The previous secret during a rotation: both sign until it is dropped.
    pub previous_secret: Option<SealedSecret>,
    /// Static headers sent with every request to it (secret values sealed); at most
    /// [`MAX_HEADERS`](crate::endpoint_headers::MAX_HEADERS), names lowercase and unique.
    #[serde(default)]
    pub headers: Vec<CustomHeader>,
    /// How the body is built.
    pub body_format: BodyFormat,
    /// At most this many deliveries per second to this endpoint (dispatcher-enforced);
    /// 1 to [`MAX_RATE_LIMIT`].
    pub rate_limit: Option<u32>,
    /// Strict FIFO (DESIGN §6.4): its deliveries go one at a time in enqueue order, whatever
    /// their ordering keys. Read at fan-out: each delivery written while it is set carries
    /// the endpoint's FIFO barrier ([`crate::claim_rules::barrier_key`]), so a toggle applies
    /// to deliveries enqueued afterwards.
    #[serde(default)]
    pub fifo: bool,
    /// The outcome and time of the last attempt of a delivery to it (written by the store
    /// with the completion; `None` until one finished). Stores ignore it on create.
    #[serde(default)]
    pub last_delivery: Option<LastDelivery>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it was last changed.
    pub updated_at: Timestamp,
}

impl Endpoint {
    /// Whether a message of `tenant` and `topic` fans out to this endpoint, whatever its
    /// status: a paused or disabled endpoint's deliveries are written and wait
    /// ([`EndpointStatus::hold_until`]).
    pub fn receives(&self, tenant: &TenantId, topic: &Topic) -> bool {
        &self.tenant == tenant && self.filter.matches(topic)
    }
}

/// The last attempt of a delivery to an endpoint, as shown on the endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastDelivery {
    /// Success or the error class.
    pub outcome: AttemptOutcome,
    /// The HTTP status, when there was an answer.
    pub status_code: Option<u16>,
    /// When the attempt finished.
    pub at: Timestamp,
}

impl From<&AttemptRecord> for LastDelivery {
    fn from(r: &AttemptRecord) -> Self {
        LastDelivery {
            outcome: r.outcome,
            status_code: r.status_code,
            at: r.finished_at,
        }
    }
}

/// A change to an endpoint; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointUpdate {
    /// A new URL. Releases held deliveries (of an endpoint that is active after the update).
    pub url: Option<EndpointUrl>,
    /// A new description.
    pub description: Option<String>,
    /// A new filter (applies to messages enqueued afterwards).
    pub filter: Option<TopicFilter>,
    /// A new status.
    pub status: Option<EndpointStatus>,
    /// A new current secret; the old current becomes the previous one. Releases held
    /// deliveries (of an endpoint that is active after the update).
    pub rotate_secret: Option<SealedSecret>,
    /// Forget the previous secret (end of a rotation).
    pub drop_previous_secret: bool,
    /// A new body format.
    pub body_format: Option<BodyFormat>,
    /// A new rate limit (`Some(None)` removes it).
    pub rate_limit: Option<Option<u32>>,
    /// Strict FIFO on or off (applies to deliveries enqueued afterwards).
    pub fifo: Option<bool>,
    /// Replace every custom header (`Some(vec![])` removes them all); applied first.
    pub headers: Option<Vec<CustomHeader>>,
    /// Take out the custom headers of these names (any case); applied second.
    pub remove_headers: Vec<String>,
    /// Set these custom headers (one of the same name is replaced in place, a new one is
    /// appended); applied last.
    pub set_headers: Vec<CustomHeader>,
}

impl EndpointUpdate {
    /// Whether applying this update releases the endpoint's held deliveries: a new URL or
    /// secret, or a status set to active (a resume or re-enable, which also ends the wait of
    /// deliveries held for the endpoint) — and only when the endpoint is `active` once the
    /// update is applied (`after`): a paused or disabled endpoint's deliveries keep waiting
    /// for the resume or re-enable, with their hold unchanged, whatever else changes.
    /// Stores do it in the same transaction.
    pub fn releases_held(&self, after: &EndpointStatus) -> bool {
        *after == EndpointStatus::Active
            && (self.url.is_some()
                || self.rotate_secret.is_some()
                || self.status == Some(EndpointStatus::Active))
    }

    /// When this update pauses or disables the endpoint: the time until which its `pending`
    /// and `held` deliveries now wait ([`EndpointStatus::hold_until`]). Stores make them
    /// `held` with that due time in the same transaction, so a pause holds what was queued
    /// too. `None` for every other update.
    pub fn holds_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.status.as_ref().and_then(|s| s.hold_until(now))
    }

    /// Check the free-text fields.
    pub fn validate(&self) -> Result<()> {
        if let Some(d) = &self.description {
            check_description(d)?;
        }
        if let Some(r) = self.rate_limit {
            check_rate_limit(r)?;
        }
        if let Some(h) = &self.headers {
            check_headers(h)?;
        }
        check_headers(&self.set_headers)?;
        for r in &self.remove_headers {
            if self
                .set_headers
                .iter()
                .any(|s| s.name.eq_ignore_ascii_case(r))
            {
                return Err(Error::invalid_input(
                    "headers",
                    format!(
                        "header `{}` is both set and removed",
                        r.to_ascii_lowercase()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Apply to `endpoint` at `now` (the in-memory semantics every store reproduces).
    pub fn apply(&self, endpoint: &mut Endpoint, now: Timestamp) {
        if let Some(u) = &self.url {
            endpoint.url = u.clone();
        }
        if let Some(d) = &self.description {
            endpoint.description = d.clone();
        }
        if let Some(f) = &self.filter {
            endpoint.filter = f.clone();
        }
        if let Some(s) = &self.status {
            endpoint.status = s.clone();
        }
        if let Some(s) = &self.rotate_secret {
            endpoint.previous_secret = Some(std::mem::replace(&mut endpoint.secret, s.clone()));
        }
        if self.drop_previous_secret {
            endpoint.previous_secret = None;
        }
        if let Some(b) = self.body_format {
            endpoint.body_format = b;
        }
        if let Some(r) = self.rate_limit {
            endpoint.rate_limit = r;
        }
        if let Some(f) = self.fifo {
            endpoint.fifo = f;
        }
        if let Some(h) = &self.headers {
            endpoint.headers = h.clone();
        }
        merge_headers(
            &mut endpoint.headers,
            &self.set_headers,
            &self.remove_headers,
        );
        endpoint.updated_at = now;
    }
}

/// The highest per-endpoint rate limit, in deliveries per second.
pub const MAX_RATE_LIMIT: u32 = 1_000_000;

/// Check an endpoint's rate limit: none, or 1 to [`MAX_RATE_LIMIT`] per second.
pub fn check_rate_limit(rate_limit: Option<u32>) -> Result<()> {
    match rate_limit {
        Some(r) if !(1..=MAX_RATE_LIMIT).contains(&r) => Err(Error::invalid_input(
            "rate_limit",
            format!("must be from 1 to {MAX_RATE_LIMIT} per second"),
        )),
        _ => Ok(()),
    }
}

/// Check an endpoint description.
pub fn check_description(d: &str) -> Result<()> {
    if d.chars().count() > 500 || d.chars().any(|c| c.is_control() && c != '\n') {
        return Err(Error::invalid_input(
            "description",
            "must be at most 500 characters without control characters",
        ));
    }
    Ok(())
}

/// A named in-process subscriber, persisted so fan-out at enqueue can see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumer {
    /// Its name (the handler registration).
    pub name: ConsumerName,
    /// Which topics it receives (from every tenant).
    pub filter: TopicFilter,
    /// When it was registered.
    pub created_at: Timestamp,
    /// Whether its deliveries are handed out (`active`) or wait, held (`paused`); kept by
    /// `put_consumer`, changed only by `EndpointStore::set_consumer_status`.
    #[serde(default)]
    pub status: ConsumerStatus,
}

/// Whether a consumer's deliveries are handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsumerStatus {
    /// Claimed and delivered as usual.
    #[default]
    Active,
    /// Its deliveries wait, `held` (due never), until it is resumed; none is lost and no
    /// attempt is spent.
    Paused,
}

impl ConsumerStatus {
    /// `active` or `paused` (as stored).
    pub fn as_str(self) -> &'static str {
        match self {
            ConsumerStatus::Active => "active",
            ConsumerStatus::Paused => "paused",
        }
    }

    /// The status a store wrote with [`ConsumerStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(ConsumerStatus::Active),
            "paused" => Some(ConsumerStatus::Paused),
            _ => None,
        }
    }

    /// The due time of a held delivery of a consumer in this status: never while paused.
    pub fn hold_until(self) -> Option<Timestamp> {
        match self {
            ConsumerStatus::Active => None,
            ConsumerStatus::Paused => Some(Timestamp::MAX),
        }
    }
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
