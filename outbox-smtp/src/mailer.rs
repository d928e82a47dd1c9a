//! [`SmtpMailer`]: a [`Mailer`] that speaks SMTP through `lettre`.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use lettre::address::{Address, Envelope};
use lettre::message::header::ContentType;
use lettre::message::{Mailbox, MultiPart};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, Certificate, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::response::Response;
use outboxkit_core::{
    Accepted, Clock, IdempotencyKey, MailCapabilities, MailError, MailErrorCode, MailMessage,
    MailOutcome, MailSent, Mailer, SystemClock, Timestamp,
};

use crate::config::{SmtpAuth, SmtpConfig, SmtpSecurity};
use crate::error::{classify, failure, Failure, Stage};

/// Sends e-mail over SMTP: STARTTLS (required by default) or implicit TLS, AUTH PLAIN or
/// LOGIN, a small pool of open connections, one deadline per send, and the delivery's
/// idempotency key as the `Message-ID` (`<outbox-…@sender-domain>`, the same on every
/// attempt, so a receiving system can de-duplicate).
///
/// Every failure says whether the message was certainly not sent or may have been: only a
/// connection lost (or the deadline passed) after the message data went out is `Unknown`,
/// and an SMTP server does not deduplicate, so such a delivery is never sent again unless
/// [`SmtpConfig::idempotent`] says the server does. See the crate docs for the whole table.
///
/// After an authentication, TLS or sender refusal the mailer reports itself unavailable for
/// [`SmtpConfig::refusal_pause`]: the dispatcher then claims no e-mail, so a wrong password
/// costs one dead letter (replayable), not the whole queue.
#[derive(Clone)]
pub struct SmtpMailer {
    inner: Arc<Inner>,
}

struct Inner {
    config: SmtpConfig,
    from: Address,
    tls: Option<TlsParameters>,
    client_id: ClientId,
    credentials: Option<Credentials>,
    mechanisms: Vec<Mechanism>,
    idle: Mutex<Vec<AsyncSmtpConnection>>,
    clock: Arc<dyn Clock>,
    paused_until: Mutex<Option<Timestamp>>,
}

impl fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("config", &self.inner.config)
            .field("idle", &lock(&self.inner.idle).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn refused(detail: &str) -> MailError {
    MailError::new(MailErrorCode::MessageRefused, MailOutcome::NotSent, detail)
}

impl SmtpMailer {
    /// A mailer with these settings, validated here (a bad one is `Misconfigured` naming
    /// the field). Nothing is connected until the first send.
    pub fn new(config: SmtpConfig) -> outboxkit_core::Result<Self> {
        Self::with_clock(config, Arc::new(SystemClock))
    }

    /// The same, reading time (for [`SmtpConfig::refusal_pause`]) from `clock`.
    pub fn with_clock(config: SmtpConfig, clock: Arc<dyn Clock>) -> outboxkit_core::Result<Self> {
        config.validate()?;
        let from: Address = config
            .from
            .parse()
            .map_err(|_| outboxkit_core::Error::misconfigured("from", "not an e-mail address"))?;
        let tls = match config.security {
            SmtpSecurity::None => None,
            SmtpSecurity::StartTlsRequired | SmtpSecurity::ImplicitTls => {
                let mut b = TlsParameters::builder(config.host.clone());
                for pem in &config.root_certificates {
                    let cert = Certificate::from_pem(pem.as_bytes()).map_err(|_| {
                        outboxkit_core::Error::misconfigured("root_certificates", "not a PEM")
                    })?;
                    b = b.add_root_certificate(cert);
                }
                Some(b.build_rustls().map_err(|_| {
                    outboxkit_core::Error::misconfigured("host", "no tls settings for this host")
                })?)
            }
        };
        let credentials = match (&config.username, &config.password) {
            (Some(u), Some(p)) => Some(Credentials::new(u.clone(), p.clone())),
            _ => None,
        };
        let mechanisms = config
            .auth_mechanisms
            .iter()
            .map(|m| match m {
                SmtpAuth::Plain => Mechanism::Plain,
                SmtpAuth::Login => Mechanism::Login,
            })
            .collect();
        Ok(SmtpMailer {
            inner: Arc::new(Inner {
                client_id: ClientId::Domain(config.hello_name.clone()),
                config,
                from,
                tls,
                credentials,
                mechanisms,
                idle: Mutex::new(Vec::new()),
                clock,
                paused_until: Mutex::new(None),
            }),
        })
    }

    /// Whether the server deduplicates (from the configuration; false by default).
    pub fn is_idempotent(&self) -> bool {
        self.inner.config.idempotent
    }

    /// Open a connection (TLS, AUTH) and close it again: a start-up check that the
    /// settings work. Sends no mail.
    ///
    /// # Cancel Safety
    /// Safe: dropping it drops the connection.
    pub async fn check(&self) -> Result<(), MailError> {
        let stage = AtomicU8::new(Stage::Connect as u8);
        let run = async {
            let mut conn = self.inner.connect().await?;
            let _ = conn.quit().await;
            Ok::<(), Failure>(())
        };
        match tokio::time::timeout(self.inner.config.timeout, run).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(f)) => Err(self.inner.failed(&stage, f)),
            Err(_) => Err(self.inner.failed(&stage, Failure::Deadline)),
        }
    }

    /// The message as SMTP sends it: envelope and formatted bytes.
    fn compose(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<(Envelope, Vec<u8>), MailError> {
        let inner = &self.inner;
        let to: Address = message
            .to
            .parse()
            .map_err(|_| refused("the recipient is not a valid e-mail address"))?;
        let name = message
            .from_name
            .as_ref()
            .or(inner.config.from_name.as_ref())
            .cloned();
        let mut b = lettre::Message::builder()
            .from(Mailbox::new(name, inner.from.clone()))
            .to(Mailbox::new(None, to.clone()))
            .subject(message.subject.clone())
            .message_id(Some(format!("<{}@{}>", key.as_str(), inner.from.domain())));
        if let Some(r) = &message.reply_to {
            let r: Mailbox = r
                .parse()
                .map_err(|_| refused("the reply-to is not a valid e-mail address"))?;
            b = b.reply_to(r);
        }
        let email = match &message.html {
            None => b.header(ContentType::TEXT_PLAIN).body(message.text.clone()),
            Some(html) => b.multipart(MultiPart::alternative_plain_html(
                message.text.clone(),
                html.clone(),
            )),
        }
        .map_err(|_| refused("the message could not be encoded"))?;
        let envelope = Envelope::new(Some(inner.from.clone()), vec![to])
            .map_err(|_| refused("the message has no valid envelope"))?;
        Ok((envelope, email.formatted()))
    }
}

/// Whether an error came from TLS (a handshake or certificate failure).
fn is_tls(e: &lettre::transport::smtp::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|i| i.is::<rustls::Error>()) {
                return true;
            }
        }
        source = err.source();
    }
    e.is_tls()
}

fn tls_aware(e: &lettre::transport::smtp::Error) -> Failure {
    if e.status().is_none() && is_tls(e) {
        Failure::Tls
    } else {
        failure(e)
    }
}

impl Inner {
    /// A fresh connection: TCP (+ TLS), greeting, EHLO, STARTTLS, AUTH.
    async fn connect(&self) -> Result<AsyncSmtpConnection, Failure> {
        let c = &self.config;
        let implicit = match c.security {
            SmtpSecurity::ImplicitTls => self.tls.clone(),
            _ => None,
        };
        let mut conn = AsyncSmtpConnection::connect_tokio1(
            (c.host.as_str(), c.port),
            Some(c.timeout),
            &self.client_id,
            implicit,
            None,
        )
        .await
        .map_err(|e| tls_aware(&e))?;
        if c.security == SmtpSecurity::StartTlsRequired {
            let Some(tls) = self.tls.clone() else {
                return Err(Failure::Tls);
            };
            if !conn.can_starttls() {
                // Never fall back to clear text.
                conn.abort().await;
                return Err(Failure::Tls);
            }
            conn.starttls(tls, &self.client_id)
                .await
                .map_err(|e| tls_aware(&e))?;
        }
        if let Some(creds) = &self.credentials {
            if conn
                .server_info()
                .get_auth_mechanism(&self.mechanisms)
                .is_none()
            {
                conn.abort().await;
                return Err(Failure::NoAuthMechanism);
            }
            conn.auth(&self.mechanisms, creds)
                .await
                .map_err(|e| failure(&e))?;
        }
        Ok(conn)
    }

    /// `MAIL FROM`, `RCPT TO`, `DATA`, the data: the stage is kept in `stage`.
    async fn transaction(
        &self,
        conn: &mut AsyncSmtpConnection,
        envelope: &Envelope,
        email: &[u8],
        stage: &AtomicU8,
    ) -> Result<Response, Failure> {
        let info = conn.server_info();
        let mut options = Vec::new();
        let non_ascii = envelope.from().is_some_and(|a| !a.to_string().is_ascii())
            || envelope.to().iter().any(|a| !a.to_string().is_ascii());
        if non_ascii {
            if !info.supports_feature(Extension::SmtpUtfEight) {
                // The recipient cannot be named to this server: refused for the recipient.
                stage.store(Stage::RcptTo as u8, Ordering::SeqCst);
                return Err(Failure::Reply(553));
            }
            options.push(MailParameter::SmtpUtfEight);
        }
        if !email.is_ascii() && info.supports_feature(Extension::EightBitMime) {
            options.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        stage.store(Stage::MailFrom as u8, Ordering::SeqCst);
        conn.command(Mail::new(envelope.from().cloned(), options))
            .await
            .map_err(|e| failure(&e))?;
        stage.store(Stage::RcptTo as u8, Ordering::SeqCst);
        for to in envelope.to() {
            conn.command(Rcpt::new(to.clone(), vec![]))
                .await
                .map_err(|e| failure(&e))?;
        }
        stage.store(Stage::Data as u8, Ordering::SeqCst);
        conn.command(Data).await.map_err(|e| failure(&e))?;
        stage.store(Stage::Body as u8, Ordering::SeqCst);
        conn.message(email).await.map_err(|e| failure(&e))
    }

    /// One send on a pooled connection when there is one (a stale one is replaced before
    /// anything was sent), else on a fresh one.
    async fn send(
        &self,
        envelope: &Envelope,
        email: &[u8],
        stage: &AtomicU8,
    ) -> Result<Response, Failure> {
        let pooled = lock(&self.idle).pop();
        if let Some(mut conn) = pooled {
            match self.transaction(&mut conn, envelope, email, stage).await {
                Ok(r) => {
                    self.keep(conn);
                    return Ok(r);
                }
                // The server closed the idle connection: nothing was sent, try a new one.
                Err(Failure::Lost | Failure::Reply(421))
                    if stage.load(Ordering::SeqCst) == Stage::MailFrom as u8 => {}
                Err(f) => return Err(f),
            }
        }
        stage.store(Stage::Connect as u8, Ordering::SeqCst);
        let mut conn = self.connect().await?;
        let r = self.transaction(&mut conn, envelope, email, stage).await?;
        self.keep(conn);
        Ok(r)
    }

    fn keep(&self, conn: AsyncSmtpConnection) {
        if conn.has_broken() {
            return;
        }
        let mut idle = lock(&self.idle);
        if idle.len() < self.config.pool_size {
            idle.push(conn);
        }
    }

    /// The mail error of a failure; a configuration refusal pauses the mailer.
    fn failed(&self, stage: &AtomicU8, f: Failure) -> MailError {
        let error = classify(Stage::from_u8(stage.load(Ordering::SeqCst)), f);
        if error.code == MailErrorCode::ConfigurationRefused {
            let until = self.clock.now().saturating_add(self.config.refusal_pause);
            *lock(&self.paused_until) = Some(until);
            lock(&self.idle).clear();
            tracing::warn!(detail = %error.detail, "smtp mailer paused after a configuration refusal");
        }
        error
    }
}

/// The server's answer as a provider id: its first line, when short and printable (for
/// example `2.0.0 Ok: queued as 4F2A1`).
fn provider_id(r: &Response) -> Option<String> {
    let line = r.first_line()?.trim();
    (!line.is_empty() && line.len() <= 200 && !line.chars().any(char::is_control))
        .then(|| line.to_owned())
}

impl SmtpMailer {
    /// One send: the receipt and the server's final reply, as text.
    async fn exchange(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<(Accepted, Option<String>), MailError> {
        let (envelope, email) = self.compose(message, key)?;
        if !self.available() {
            // Claimed before the pause began: not sent, and not another refusal to die of.
            return Err(MailError::new(
                MailErrorCode::Unavailable,
                MailOutcome::NotSent,
                "the smtp mailer is paused after a configuration refusal",
            ));
        }
        let stage = AtomicU8::new(Stage::Connect as u8);
        let inner = &self.inner;
        let sent =
            tokio::time::timeout(inner.config.timeout, inner.send(&envelope, &email, &stage)).await;
        match sent {
            Ok(Ok(response)) => {
                let lines: Vec<&str> = response.message().collect();
                let reply = format!("{} {}", response.code(), lines.join("\n"));
                Ok((
                    Accepted {
                        provider_id: provider_id(&response),
                    },
                    Some(reply),
                ))
            }
            Ok(Err(f)) => Err(inner.failed(&stage, f)),
            Err(_) => Err(inner.failed(&stage, Failure::Deadline)),
        }
    }
}

#[async_trait]
impl Mailer for SmtpMailer {
    /// # Cancel Safety
    /// Dropping the future drops the connection; whether the message went out is then
    /// unknown, as for a deadline.
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        self.exchange(message, key)
            .await
            .map(|(accepted, _)| accepted)
    }

    /// The server's final reply to an accepted message as the detail's body (`250 2.0.0 Ok:
    /// queued as …`; a refusal's code and meaning are the attempt's excerpt) and the total
    /// time; no request headers (the mail's own carry addresses), no address or connect
    /// timing (lettre's connection does not expose them).
    async fn send_detailed(&self, message: &MailMessage, key: &IdempotencyKey) -> MailSent {
        let watch = outboxkit_core::Stopwatch::start();
        let (result, reply) = match self.exchange(message, key).await {
            Ok((accepted, reply)) => (Ok(accepted), reply),
            Err(e) => (Err(e), None),
        };
        let mut detail = outboxkit_core::AttemptDetail::default();
        if let Some(reply) = reply {
            detail.set_response_body(
                reply.as_bytes(),
                outboxkit_core::model::RESPONSE_BODY_CAP_DEFAULT,
            );
        }
        detail.timing.total = watch.elapsed();
        MailSent {
            result,
            detail: Some(Box::new(detail)),
        }
    }

    fn capabilities(&self) -> MailCapabilities {
        MailCapabilities {
            idempotent: self.inner.config.idempotent,
        }
    }

    /// False for [`SmtpConfig::refusal_pause`] after an authentication, TLS or sender
    /// refusal.
    fn available(&self) -> bool {
        match *lock(&self.inner.paused_until) {
            Some(until) => self.inner.clock.now() >= until,
            None => true,
        }
    }
}
