//! Settings of the transport and the mailer, with documented defaults, validated once at
//! construction.

use std::fmt;
use std::time::Duration;

use outboxkit_core::model::{check_response_body_cap, RESPONSE_BODY_CAP_DEFAULT};

use crate::error::HttpError;

/// The default deadline over connect, headers and body: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The default cap on the response body read: 64 KiB (the rest is never read).
pub const DEFAULT_MAX_BODY: usize = 64 * 1024;

/// The default `user-agent`: `outbox/<crate version>`.
pub const DEFAULT_USER_AGENT: &str = concat!("outbox/", env!("CARGO_PKG_VERSION"));

/// Settings of [`crate::HttpTransport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTransportConfig {
    /// The deadline used when a request carries none (a zero `SignedRequest::timeout`).
    /// Default 10 s.
    pub timeout: Duration,
    /// How much of a response body is read before the response is dropped. Default 64 KiB.
    pub max_body: usize,
    /// The `user-agent` header. Default `outbox/<crate version>`.
    pub user_agent: String,
    /// How much of a response body `send_detailed` keeps for the ledger (the attempt in
    /// full). Default [`RESPONSE_BODY_CAP_DEFAULT`] (16 KiB), at most
    /// [`outboxkit_core::model::RESPONSE_BODY_CAP_MAX`] (64 KiB, the read cap).
    pub response_body_cap: usize,
}

impl Default for HttpTransportConfig {
    fn default() -> Self {
        HttpTransportConfig {
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            user_agent: DEFAULT_USER_AGENT.to_owned(),
            response_body_cap: RESPONSE_BODY_CAP_DEFAULT,
        }
    }
}

impl HttpTransportConfig {
    pub(crate) fn validate(&self) -> Result<(), HttpError> {
        if self.timeout.is_zero() {
            return Err(setting("timeout", "must be more than zero"));
        }
        if self.max_body == 0 {
            return Err(setting("max_body", "must be at least one byte"));
        }
        check_header_value("user_agent", &self.user_agent)?;
        check_response_body_cap(self.response_body_cap)
            .map_err(|_| setting("response_body_cap", "must be at most 65536 bytes (64 KiB)"))?;
        Ok(())
    }
}

/// Settings of [`crate::HttpMailer`].
#[derive(Clone, PartialEq, Eq)]
pub struct HttpMailerConfig {
    /// The mail API's send URL (`https://…`; operator configuration, not subject to the
    /// egress policy). Required.
    pub url: String,
    /// Sent as `Authorization: Bearer <key>`. Required; never printed.
    pub api_key: String,
    /// Whether the service deduplicates by `Idempotency-Key` (what
    /// `Mailer::capabilities` reports). Default false.
    pub idempotent: bool,
    /// The deadline of one call. Default 10 s.
    pub timeout: Duration,
    /// The sender's display name when a message names none. Default none.
    pub from_name: Option<String>,
}

impl Default for HttpMailerConfig {
    fn default() -> Self {
        HttpMailerConfig {
            url: String::new(),
            api_key: String::new(),
            idempotent: false,
            timeout: DEFAULT_TIMEOUT,
            from_name: None,
        }
    }
}

impl fmt::Debug for HttpMailerConfig {
    // The key is a secret and the URL may carry a token: neither is printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpMailerConfig")
            .field("url", &"<redacted>")
            .field("api_key", &"<redacted>")
            .field("idempotent", &self.idempotent)
            .field("timeout", &self.timeout)
            .field("from_name", &self.from_name.is_some())
            .finish()
    }
}

impl HttpMailerConfig {
    pub(crate) fn validate(&self) -> Result<reqwest::Url, HttpError> {
        let url = reqwest::Url::parse(self.url.trim())
            .map_err(|_| setting("url", "is not a valid url"))?;
        if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
            return Err(setting("url", "must be an http or https url with a host"));
        }
        if self.api_key.trim().is_empty() {
            return Err(setting("api_key", "must not be empty"));
        }
        check_header_value("api_key", &self.api_key)?;
        if self.timeout.is_zero() {
            return Err(setting("timeout", "must be more than zero"));
        }
        Ok(url)
    }
}

fn setting(field: &'static str, message: &'static str) -> HttpError {
    HttpError::Setting { field, message }
}

fn check_header_value(field: &'static str, value: &str) -> Result<(), HttpError> {
    reqwest::header::HeaderValue::from_str(value)
        .map(|_| ())
        .map_err(|_| setting(field, "must be visible ascii without control characters"))
}
