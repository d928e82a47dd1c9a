//! The e-mail channel's port: [`Mailer`], its message and its errors.

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::{DeliveryId, IdempotencyKey};

/// One e-mail to send.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailMessage {
    /// The address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// The HTML body.
    pub html: Option<String>,
    /// A reply-to address.
    pub reply_to: Option<String>,
    /// The sender's display name.
    pub from_name: Option<String>,
}

impl fmt::Debug for MailMessage {
    // Addresses and bodies are personal data: never in debug output or logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MailMessage")
            .field("subject_len", &self.subject.len())
            .field("text_len", &self.text.len())
            .field("html", &self.html.is_some())
            .finish_non_exhaustive()
    }
}

/// The default installation prefix of mail idempotency keys.
pub const DEFAULT_MAIL_KEY_PREFIX: &str = "outbox";

/// The longest mail key prefix: with `-` and a hyphenated UUID (37 characters) the key stays
/// within the 200 characters of an [`IdempotencyKey`].
pub const MAX_MAIL_KEY_PREFIX: usize = 200 - 37;

/// The idempotency key of an e-mail delivery with the default prefix:
/// `outbox-<delivery id>`, identical on every attempt, never random.
pub fn mail_idempotency_key(delivery: DeliveryId) -> IdempotencyKey {
    // "outbox-" and a hyphenated UUID: 43 visible ASCII characters, always valid.
    IdempotencyKey::trusted(format!("{DEFAULT_MAIL_KEY_PREFIX}-{delivery}"))
}

/// Check a mail key prefix: 1 to [`MAX_MAIL_KEY_PREFIX`] visible ASCII characters
/// (`InvalidInput`, field `mail_key_prefix`, otherwise).
pub fn check_mail_key_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty()
        || prefix.len() > MAX_MAIL_KEY_PREFIX
        || !prefix.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Error::invalid_input(
            "mail_key_prefix",
            format!("must be 1 to {MAX_MAIL_KEY_PREFIX} visible ASCII characters"),
        ));
    }
    Ok(())
}

/// The idempotency key of an e-mail delivery in an installation: `<prefix>-<delivery id>`,
/// identical on every attempt, never random, so two applications sharing one mail-service
/// account never collide. The prefix is checked with [`check_mail_key_prefix`].
pub fn namespaced_mail_idempotency_key(
    prefix: &str,
    delivery: DeliveryId,
) -> Result<IdempotencyKey> {
    check_mail_key_prefix(prefix)?;
    Ok(IdempotencyKey::trusted(format!("{prefix}-{delivery}")))
}

/// Whether the mail service sent the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MailOutcome {
    /// Certainly not sent: safe to try again.
    NotSent,
    /// Maybe sent (a timeout after the request went out, a 5xx): repeating it is safe only
    /// through an idempotent mailer.
    Unknown,
}

/// Why the mail service did not accept a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum MailErrorCode {
    /// The message itself was refused (bad address, content rejected).
    MessageRefused,
    /// Our configuration was refused (bad key, unverified sender).
    ConfigurationRefused,
    /// Too many requests.
    RateLimited,
    /// The service is out or unreachable.
    Unavailable,
    /// The call timed out.
    Timeout,
    /// Anything else.
    Other,
}

impl MailErrorCode {
    /// Whether the service refused the message or our configuration (never retried).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            MailErrorCode::MessageRefused | MailErrorCode::ConfigurationRefused
        )
    }

    /// A stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            MailErrorCode::MessageRefused => "message-refused",
            MailErrorCode::ConfigurationRefused => "configuration-refused",
            MailErrorCode::RateLimited => "rate-limited",
            MailErrorCode::Unavailable => "unavailable",
            MailErrorCode::Timeout => "timeout",
            MailErrorCode::Other => "other",
        }
    }
}

/// A mailer's failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailError {
    /// Why.
    pub code: MailErrorCode,
    /// Whether it was sent.
    pub outcome: MailOutcome,
    /// A short description for the ledger (never an address or a key).
    pub detail: String,
}

impl MailError {
    /// A mail error.
    pub fn new(code: MailErrorCode, outcome: MailOutcome, detail: impl Into<String>) -> Self {
        MailError {
            code,
            outcome,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for MailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mail {} ({}): {}",
            self.code.as_str(),
            match self.outcome {
                MailOutcome::NotSent => "not sent",
                MailOutcome::Unknown => "maybe sent",
            },
            self.detail
        )
    }
}

impl std::error::Error for MailError {}

/// Whether a failed send may be tried again: never for a refused message or configuration;
/// never for an unknown outcome through a mailer that does not deduplicate; otherwise yes.
pub fn may_retry(error: &MailError, idempotent: bool) -> bool {
    if error.code.is_refusal() {
        return false;
    }
    match error.outcome {
        MailOutcome::NotSent => true,
        MailOutcome::Unknown => idempotent,
    }
}

/// What a mailer can promise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MailCapabilities {
    /// The service deduplicates sends by idempotency key.
    pub idempotent: bool,
}

/// The mail service's receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The service's message id, when it returns one.
    pub provider_id: Option<String>,
}

/// One send's result and, when the mailer keeps it, the attempt in full (DESIGN §18).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MailSent {
    /// What the mail service answered.
    pub result: Result<Accepted, MailError>,
    /// The request headers as sent (the key `[redacted]`), the answer's headers and body
    /// within the cap, the timings and the address; `None` from a mailer that keeps none.
    pub detail: Option<Box<crate::model::AttemptDetail>>,
}

/// Sends e-mail.
///
/// # Contract
/// - `send` MUST NOT send twice for one idempotency key when `capabilities().idempotent`.
/// - A failure MUST say whether the message was certainly not sent (`NotSent`) or may have
///   been (`Unknown`).
/// - `available()` false MUST mean "not configured": the dispatcher then claims nothing for
///   e-mail and spends no attempts.
#[async_trait]
pub trait Mailer: Send + Sync + fmt::Debug + 'static {
    /// Send one message.
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError>;

    /// Send one message and keep the attempt in full. The default keeps nothing beyond
    /// [`Mailer::send`]'s answer.
    async fn send_detailed(&self, message: &MailMessage, key: &IdempotencyKey) -> MailSent {
        MailSent {
            result: self.send(message, key).await,
            detail: None,
        }
    }

    /// What the mailer promises.
    fn capabilities(&self) -> MailCapabilities;

    /// Whether the mailer is configured.
    fn available(&self) -> bool {
        true
    }
}

/// A shared [`Mailer`].
pub type DynMailer = dyn Mailer;

#[async_trait]
impl<T: Mailer + ?Sized> Mailer for std::sync::Arc<T> {
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        (**self).send(message, key).await
    }
    async fn send_detailed(&self, message: &MailMessage, key: &IdempotencyKey) -> MailSent {
        (**self).send_detailed(message, key).await
    }
    fn capabilities(&self) -> MailCapabilities {
        (**self).capabilities()
    }
    fn available(&self) -> bool {
        (**self).available()
    }
}

#[async_trait]
impl<T: Mailer + ?Sized> Mailer for Box<T> {
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        (**self).send(message, key).await
    }
    async fn send_detailed(&self, message: &MailMessage, key: &IdempotencyKey) -> MailSent {
        (**self).send_detailed(message, key).await
    }
    fn capabilities(&self) -> MailCapabilities {
        (**self).capabilities()
    }
    fn available(&self) -> bool {
        (**self).available()
    }
}

/// Build the e-mail of a message for one recipient address. The default reads the payload
/// as JSON `{"subject", "text", "html"?, "reply_to"?, "from_name"?}`.
pub fn mail_from_payload(payload: &[u8], to: String) -> Result<MailMessage> {
    #[derive(Deserialize)]
    struct Body {
        subject: String,
        text: String,
        html: Option<String>,
        reply_to: Option<String>,
        from_name: Option<String>,
    }
    let b: Body = serde_json::from_slice(payload).map_err(|_| {
        Error::invalid_input("payload", "an e-mail payload needs `subject` and `text`")
    })?;
    Ok(MailMessage {
        to,
        subject: b.subject,
        text: b.text,
        html: b.html,
        reply_to: b.reply_to,
        from_name: b.from_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_keys_are_stable_and_checked() {
        let id = DeliveryId::parse("01900000-0000-7000-8000-0000000000aa").unwrap();
        let k = namespaced_mail_idempotency_key("shop-prod", id).unwrap();
        assert_eq!(k.as_str(), format!("shop-prod-{id}"));
        assert_eq!(namespaced_mail_idempotency_key("shop-prod", id).unwrap(), k);
        assert_eq!(
            namespaced_mail_idempotency_key(DEFAULT_MAIL_KEY_PREFIX, id).unwrap(),
            mail_idempotency_key(id)
        );
        let longest = "p".repeat(MAX_MAIL_KEY_PREFIX);
        assert_eq!(
            namespaced_mail_idempotency_key(&longest, id)
                .unwrap()
                .as_str()
                .len(),
            200
        );
        for bad in ["", "a b", "x\n", "ü"] {
            let e = namespaced_mail_idempotency_key(bad, id).unwrap_err();
            assert_eq!(e.field(), Some("mail_key_prefix"), "{bad:?}");
        }
        let e = namespaced_mail_idempotency_key(&format!("{longest}p"), id).unwrap_err();
        assert_eq!(e.field(), Some("mail_key_prefix"));
    }

    #[test]
    fn may_retry_table() {
        use MailErrorCode as C;
        use MailOutcome as O;
        let rows = [
            (C::MessageRefused, O::NotSent, false, false),
            (C::MessageRefused, O::NotSent, true, false),
            (C::ConfigurationRefused, O::NotSent, true, false),
            (C::Unavailable, O::NotSent, false, true),
            (C::Timeout, O::Unknown, false, false),
            (C::Timeout, O::Unknown, true, true),
            (C::RateLimited, O::NotSent, false, true),
            (C::Other, O::Unknown, false, false),
        ];
        for (code, outcome, idempotent, want) in rows {
            assert_eq!(
                may_retry(&MailError::new(code, outcome, "x"), idempotent),
                want,
                "{code:?} {outcome:?} {idempotent}"
            );
        }
    }

    #[test]
    fn keys_are_derived_from_the_delivery() {
        let id = DeliveryId::parse("01900000-0000-7000-8000-000000000001").unwrap();
        let k = mail_idempotency_key(id);
        assert_eq!(k.as_str(), "outbox-01900000-0000-7000-8000-000000000001");
        assert_eq!(mail_idempotency_key(id), k);
    }

    #[test]
    fn payload_mail_and_redacted_debug() {
        let m = mail_from_payload(br#"{"subject":"Hi","text":"Body"}"#, "a@example.com".into())
            .unwrap();
        assert_eq!(m.subject, "Hi");
        assert!(!format!("{m:?}").contains("a@example.com"));
        assert_eq!(
            mail_from_payload(b"{}", "a@example.com".into())
                .unwrap_err()
                .field(),
            Some("payload")
        );
    }
}
