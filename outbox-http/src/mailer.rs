//! [`HttpMailer`]: a [`Mailer`] for JSON mail APIs.

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH};
use http::header::{CONTENT_TYPE, USER_AGENT};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use outboxkit_core::{
    Accepted, IdempotencyKey, MailCapabilities, MailError, MailErrorCode, MailMessage, MailOutcome,
    MailSent, Mailer,
};

use crate::config::{HttpMailerConfig, DEFAULT_MAX_BODY, DEFAULT_USER_AGENT};
use crate::error::{mail_failure, HttpError};
use crate::timing::Timed;

/// The connector: TCP (the system resolver: the URL is operator configuration), then rustls
/// for `https`, each new connection timed (`timing.rs`).
pub(crate) type Connector = Timed<hyper_rustls::HttpsConnector<HttpConnector>>;

const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// Sends e-mail through a JSON mail API: one `POST` of
/// `{"to", "subject", "text", "html", "reply_to", "from_name"}` with
/// `Authorization: Bearer <key>` and `Idempotency-Key: <key>` (the same key on every
/// attempt of one delivery).
///
/// | answer | result |
/// | --- | --- |
/// | 2xx | accepted; `provider_id` from a JSON `id` field when present |
/// | 401, 403 | `configuration-refused`, not sent |
/// | 408 | `timeout`, not sent |
/// | 429 | `rate-limited`, not sent |
/// | other 4xx | `message-refused`, not sent |
/// | 3xx (never followed) | `configuration-refused`, not sent |
/// | 5xx | `unavailable`, maybe sent |
/// | deadline passed (one deadline over connect, answer and body) | `timeout`, maybe sent |
/// | connection refused, name not resolved, TLS refused | `unavailable`, not sent |
///
/// The URL is operator configuration: the egress policy does not apply to it. No proxy
/// from the environment is used. Built on hyper-util's pooled client with rustls, as the
/// webhook transport is (reqwest's layers — redirects, retries, proxies — cost a request
/// more than hyper's own work, and a mail API call needs none of them).
///
/// ```no_run
/// use outboxkit_http::{HttpMailer, HttpMailerConfig};
///
/// let mailer = HttpMailer::new(HttpMailerConfig {
///     url: "https://mail.example.com/v1/send".into(),
///     api_key: std::env::var("MAIL_API_KEY").unwrap_or_default(),
///     idempotent: true,
///     ..HttpMailerConfig::default()
/// })?;
/// # Ok::<(), outboxkit_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct HttpMailer {
    client: Client<Connector, Full<Bytes>>,
    uri: http::Uri,
    /// The headers of every send, built once: `authorization: Bearer <key>` (marked
    /// sensitive: never printed), `content-type`, `user-agent`.
    headers: HeaderMap,
    config: HttpMailerConfig,
    /// How much of an answer's body `send_detailed` keeps.
    response_body_cap: usize,
}

impl HttpMailer {
    /// A mailer with these settings (validated here: a bad one is `Misconfigured`).
    pub fn new(config: HttpMailerConfig) -> outboxkit_core::Result<Self> {
        let url = config.validate()?;
        let uri = http::Uri::try_from(String::from(url)).map_err(|_| HttpError::Setting {
            field: "url",
            message: "is not a valid url",
        })?;
        // The system resolver: the URL is operator configuration, not subject to the policy.
        let client = crate::tls::pooled(crate::tls::connector(HttpConnector::new()));
        // Checked as a header value by `validate`.
        let mut auth =
            HeaderValue::try_from(format!("Bearer {}", config.api_key)).map_err(|_| {
                HttpError::Setting {
                    field: "api_key",
                    message: "is not a valid header value",
                }
            })?;
        auth.set_sensitive(true);
        let mut headers = HeaderMap::with_capacity(5);
        headers.insert(AUTHORIZATION, auth);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static(DEFAULT_USER_AGENT));
        Ok(HttpMailer {
            client,
            uri,
            headers,
            config,
            response_body_cap: outboxkit_core::model::RESPONSE_BODY_CAP_DEFAULT,
        })
    }

    /// Keep at most `cap` bytes of each answer's body in `send_detailed` (default 16 KiB;
    /// more than 64 KiB is `Misconfigured`).
    pub fn with_response_body_cap(mut self, cap: usize) -> outboxkit_core::Result<Self> {
        outboxkit_core::model::check_response_body_cap(cap).map_err(|_| HttpError::Setting {
            field: "response_body_cap",
            message: "must be at most 65536 bytes (64 KiB)",
        })?;
        self.response_body_cap = cap;
        Ok(self)
    }

    /// The request of one send: the headers built once, the key, the body's length. A key
    /// that is not a valid header value is refused before anything is sent.
    pub(crate) fn request(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<http::Request<Full<Bytes>>, MailError> {
        let from_name = message
            .from_name
            .as_ref()
            .or(self.config.from_name.as_ref());
        let key = HeaderValue::from_str(key.as_str()).map_err(|_| {
            refused(
                MailErrorCode::MessageRefused,
                MailOutcome::NotSent,
                "the idempotency key is not a valid header value",
            )
        })?;
        let body = mail_body(message, from_name);
        let mut headers = self.headers.clone();
        headers.insert(IDEMPOTENCY_KEY, key);
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        let mut request = http::Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        Ok(request)
    }

    pub(crate) fn client(&self) -> &Client<Connector, Full<Bytes>> {
        &self.client
    }

    pub(crate) fn response_body_cap(&self) -> usize {
        self.response_body_cap
    }

    /// The deadline of one call (connect, answer and body).
    pub(crate) fn timeout(&self) -> std::time::Duration {
        self.config.timeout
    }

    /// Whether the service deduplicates by idempotency key (from the configuration).
    pub fn is_idempotent(&self) -> bool {
        self.config.idempotent
    }

    /// The exchange of `send`: the answer's status, then a 2xx body read for the id.
    async fn exchange(&self, request: http::Request<Full<Bytes>>) -> Result<Accepted, MailError> {
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| mail_failure(&e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(from_status(status));
        }
        // Accepted whatever the body says; read a bounded amount of it for the id.
        let mut body = response.into_body();
        let mut read = Vec::new();
        while read.len() < DEFAULT_MAX_BODY {
            match next_chunk(&mut body).await {
                Some(chunk) => read.extend_from_slice(&chunk),
                None => break,
            }
        }
        Ok(Accepted {
            provider_id: provider_id(&read),
        })
    }
}

/// The next data chunk of an answer's body; `None` at its end or on a failed read (the
/// status arrived: a body cut short does not change it).
pub(crate) async fn next_chunk(body: &mut hyper::body::Incoming) -> Option<Bytes> {
    loop {
        match body.frame().await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) => return Some(data),
                Err(_) => continue, // trailers
            },
            Err(_) => return None,
        }
    }
}

/// The deadline passed: the request may have been sent.
pub(crate) fn deadline_passed() -> MailError {
    refused(
        MailErrorCode::Timeout,
        MailOutcome::Unknown,
        "the mail service did not answer in time",
    )
}

fn refused(code: MailErrorCode, outcome: MailOutcome, detail: &str) -> MailError {
    MailError::new(code, outcome, detail)
}

/// The mail error for a non-2xx status.
pub(crate) fn from_status(status: u16) -> MailError {
    use MailErrorCode as C;
    use MailOutcome as O;
    match status {
        401 | 403 => refused(
            C::ConfigurationRefused,
            O::NotSent,
            "the mail service refused the credentials",
        ),
        408 => refused(
            C::Timeout,
            O::NotSent,
            "the mail service timed out reading the request",
        ),
        429 => refused(
            C::RateLimited,
            O::NotSent,
            "the mail service is rate limiting",
        ),
        300..=399 => refused(
            C::ConfigurationRefused,
            O::NotSent,
            "the mail service redirected (check the configured url)",
        ),
        400..=499 => refused(
            C::MessageRefused,
            O::NotSent,
            "the mail service refused the message",
        ),
        500..=599 => refused(C::Unavailable, O::Unknown, "the mail service failed (5xx)"),
        _ => refused(
            C::Other,
            O::Unknown,
            "the mail service gave an unexpected status",
        ),
    }
}

/// The request body: `{"from_name","html","reply_to","subject","text","to"}` (keys in
/// this order, absent ones `null`), written straight into one buffer rather than through a
/// `serde_json::Value` tree.
fn mail_body(message: &MailMessage, from_name: Option<&String>) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, key: &str, value: Option<&str>) {
        out.extend_from_slice(key.as_bytes());
        match value {
            // Writing a `str` to a `Vec` cannot fail.
            Some(v) => serde_json::to_writer(&mut *out, v).unwrap_or_default(),
            None => out.extend_from_slice(b"null"),
        }
    }
    let m = message;
    let mut out = Vec::with_capacity(m.to.len() + m.subject.len() + m.text.len() + 96);
    field(&mut out, "{\"from_name\":", from_name.map(String::as_str));
    field(&mut out, ",\"html\":", m.html.as_deref());
    field(&mut out, ",\"reply_to\":", m.reply_to.as_deref());
    field(&mut out, ",\"subject\":", Some(&m.subject));
    field(&mut out, ",\"text\":", Some(&m.text));
    field(&mut out, ",\"to\":", Some(&m.to));
    out.push(b'}');
    out
}

/// A JSON `id` field (a string or a number) of at most 200 characters.
pub(crate) fn provider_id(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = match value.get("id")? {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!id.is_empty() && id.len() <= 200 && !id.chars().any(char::is_control)).then_some(id)
}

#[async_trait]
impl Mailer for HttpMailer {
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        let request = self.request(message, key)?;
        // One deadline from connect to the end of the body read.
        match tokio::time::timeout(self.config.timeout, self.exchange(request)).await {
            Ok(result) => result,
            Err(_) => Err(deadline_passed()),
        }
    }

    async fn send_detailed(&self, message: &MailMessage, key: &IdempotencyKey) -> MailSent {
        self.send_keeping_detail(message, key).await
    }

    fn capabilities(&self) -> MailCapabilities {
        MailCapabilities {
            idempotent: self.config.idempotent,
        }
    }

    fn available(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_mail_errors() {
        use MailErrorCode as C;
        use MailOutcome as O;
        let rows = [
            (401, C::ConfigurationRefused, O::NotSent),
            (403, C::ConfigurationRefused, O::NotSent),
            (400, C::MessageRefused, O::NotSent),
            (422, C::MessageRefused, O::NotSent),
            (408, C::Timeout, O::NotSent),
            (429, C::RateLimited, O::NotSent),
            (302, C::ConfigurationRefused, O::NotSent),
            (500, C::Unavailable, O::Unknown),
            (503, C::Unavailable, O::Unknown),
        ];
        for (status, code, outcome) in rows {
            let e = from_status(status);
            assert_eq!((e.code, e.outcome), (code, outcome), "{status}");
        }
    }

    #[test]
    fn the_body_is_the_json_object_of_the_mail() {
        let mut m = MailMessage {
            to: "a@example.com".into(),
            subject: "Hi \"there\"".into(),
            text: "line\nnext é \u{1}".into(),
            html: None,
            reply_to: Some("r@example.com".into()),
            from_name: None,
        };
        let shop = Some("Shop".to_owned());
        for from_name in [None, shop.as_ref()] {
            let want = serde_json::json!({
                "to": m.to,
                "subject": m.subject,
                "text": m.text,
                "html": m.html,
                "reply_to": m.reply_to,
                "from_name": from_name,
            });
            assert_eq!(
                mail_body(&m, from_name),
                serde_json::to_vec(&want).unwrap(),
                "the same bytes as the serde_json object"
            );
            m.html = Some("<p>x</p>".into());
        }
    }

    #[test]
    fn provider_ids_come_from_a_json_id() {
        assert_eq!(provider_id(br#"{"id":"msg_1"}"#).as_deref(), Some("msg_1"));
        assert_eq!(provider_id(br#"{"id":42}"#).as_deref(), Some("42"));
        assert_eq!(provider_id(br#"{"id":null}"#), None);
        assert_eq!(provider_id(b"queued"), None);
        assert_eq!(provider_id(b""), None);
    }
}
