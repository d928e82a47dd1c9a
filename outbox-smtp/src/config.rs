//! [`SmtpConfig`]: the settings of an [`SmtpMailer`](crate::SmtpMailer), validated once.

use std::fmt;
use std::time::Duration;

use outboxkit_core::Error;

/// How the connection is encrypted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpSecurity {
    /// Connect in clear, then upgrade with `STARTTLS`; a server that does not offer it is a
    /// configuration error: nothing is sent in clear (`smtp://`, port 587). The default.
    #[default]
    StartTlsRequired,
    /// TLS from the first byte (`smtps://`, port 465).
    ImplicitTls,
    /// Never encrypt (`smtp://…?tls=none`): for a relay on the same host or a test server
    /// only. Refused together with credentials, which would travel in clear.
    None,
}

/// An AUTH mechanism.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SmtpAuth {
    /// `AUTH PLAIN` (RFC 4616).
    Plain,
    /// `AUTH LOGIN`.
    Login,
}

/// Settings of an [`SmtpMailer`](crate::SmtpMailer). Built by hand, from
/// [`SmtpConfig::default`], or from a URL with [`SmtpConfig::from_url`]; validated by
/// [`SmtpMailer::new`](crate::SmtpMailer::new).
#[derive(Clone)]
pub struct SmtpConfig {
    /// The server's host name (also the name its certificate must carry). Required.
    pub host: String,
    /// The port. Default 587 (use 465 with [`SmtpSecurity::ImplicitTls`]).
    pub port: u16,
    /// Encryption. Default [`SmtpSecurity::StartTlsRequired`].
    pub security: SmtpSecurity,
    /// The AUTH user; `None` sends without authenticating. Default `None`.
    pub username: Option<String>,
    /// The AUTH password (never logged, never in `Debug`). Default `None`.
    pub password: Option<String>,
    /// The mechanisms to use, in order of preference, among those the server offers.
    /// Default `[Plain, Login]`.
    pub auth_mechanisms: Vec<SmtpAuth>,
    /// The envelope sender and `From` address. Required.
    pub from: String,
    /// The `From` display name when the message has none. Default `None`.
    pub from_name: Option<String>,
    /// The name sent in `EHLO`. Default `"localhost"`.
    pub hello_name: String,
    /// The deadline of one send, connecting included. Default 30 s. Keep it below the
    /// dispatcher's lease.
    pub timeout: Duration,
    /// Connections kept open between sends, for reuse. Default 4; 0 closes each after use.
    pub pool_size: usize,
    /// After an authentication, TLS or sender refusal, [`Mailer::available`] answers false
    /// for this long, so the dispatcher claims no e-mail while the configuration is wrong.
    /// Default 60 s.
    ///
    /// [`Mailer::available`]: outboxkit_core::Mailer::available
    pub refusal_pause: Duration,
    /// Extra trusted root certificates (PEM), e.g. a private CA; the public web roots are
    /// always trusted. Default none.
    pub root_certificates: Vec<String>,
    /// Whether the server deduplicates by `Message-ID` (SMTP servers usually do not).
    /// Default false: a send whose outcome is unknown is then never repeated.
    pub idempotent: bool,
}

impl Default for SmtpConfig {
    fn default() -> Self {
        SmtpConfig {
            host: String::new(),
            port: 587,
            security: SmtpSecurity::StartTlsRequired,
            username: None,
            password: None,
            auth_mechanisms: vec![SmtpAuth::Plain, SmtpAuth::Login],
            from: String::new(),
            from_name: None,
            hello_name: "localhost".into(),
            timeout: Duration::from_secs(30),
            pool_size: 4,
            refusal_pause: Duration::from_secs(60),
            root_certificates: Vec::new(),
            idempotent: false,
        }
    }
}

impl fmt::Debug for SmtpConfig {
    // The password is a secret and the addresses are personal data: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("username", &self.username.is_some())
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("auth_mechanisms", &self.auth_mechanisms)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("refusal_pause", &self.refusal_pause)
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

/// The longest deadline accepted (a send that takes longer is stuck).
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

fn invalid(field: &'static str, why: &'static str) -> Error {
    Error::misconfigured(field, why)
}

/// `%XX` escapes decoded (a `+` stays a `+`: this is a URL's user, not a form).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl SmtpConfig {
    /// Settings from `smtp://[user@]host[:port]` (STARTTLS required, port 587) or
    /// `smtps://[user@]host[:port]` (implicit TLS, port 465), and `from`. The query
    /// `?tls=none` on `smtp://` turns encryption off. A bad URL is `InvalidInput` naming
    /// `smtp_url`, and a password in it is refused:
    /// set [`SmtpConfig::password`] (the CLI reads `OUTBOX_SMTP_PASSWORD`).
    pub fn from_url(url: &str, from: &str) -> outboxkit_core::Result<Self> {
        let bad = |why: &'static str| Error::invalid_input("smtp_url", why);
        let parsed = url::Url::parse(url).map_err(|_| bad("not a URL (smtp://user@host:port)"))?;
        let (mut security, port) = match parsed.scheme() {
            "smtp" => (SmtpSecurity::StartTlsRequired, 587),
            "smtps" => (SmtpSecurity::ImplicitTls, 465),
            _ => return Err(bad("the scheme must be smtp or smtps")),
        };
        if parsed.password().is_some() {
            return Err(bad(
                "a password in the URL is refused: pass it separately (OUTBOX_SMTP_PASSWORD)",
            ));
        }
        let host = parsed.host_str().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("the URL has no host"));
        }
        if !matches!(parsed.path(), "" | "/") || parsed.fragment().is_some() {
            return Err(bad("the URL takes no path or fragment"));
        }
        for (k, v) in parsed.query_pairs() {
            match (&*k, &*v, security) {
                ("tls", "none", SmtpSecurity::StartTlsRequired) => security = SmtpSecurity::None,
                ("tls", "starttls", SmtpSecurity::StartTlsRequired) => {}
                _ => return Err(bad("the only query is tls=none or tls=starttls on smtp://")),
            }
        }
        let username = match parsed.username() {
            "" => None,
            u => Some(percent_decode(u).ok_or_else(|| bad("the user is not valid UTF-8"))?),
        };
        Ok(SmtpConfig {
            host: host.to_owned(),
            port: parsed.port().unwrap_or(port),
            security,
            username,
            from: from.to_owned(),
            ..SmtpConfig::default()
        })
    }

    /// Check every field; the first bad one is a `Misconfigured` error naming it.
    pub fn validate(&self) -> outboxkit_core::Result<()> {
        if self.host.is_empty() || self.host.len() > 253 || self.host.contains(char::is_whitespace)
        {
            return Err(invalid("host", "a host name of 1 to 253 characters"));
        }
        if self.port == 0 {
            return Err(invalid("port", "a port from 1 to 65535"));
        }
        if self.from.parse::<lettre::Address>().is_err() {
            return Err(invalid("from", "the sender must be an e-mail address"));
        }
        if let Some(name) = &self.from_name {
            if name.len() > 200 || name.chars().any(char::is_control) {
                return Err(invalid("from_name", "at most 200 characters, no controls"));
            }
        }
        if self.hello_name.is_empty()
            || self.hello_name.len() > 253
            || !self.hello_name.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(invalid("hello_name", "a host name of visible ASCII"));
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(invalid("timeout", "from 1 ms to 10 minutes"));
        }
        if self.pool_size > 1000 {
            return Err(invalid("pool_size", "at most 1000"));
        }
        if self.refusal_pause > Duration::from_secs(24 * 3600) {
            return Err(invalid("refusal_pause", "at most 24 hours"));
        }
        match (&self.username, &self.password) {
            (Some(u), Some(p)) => {
                if u.is_empty() || p.is_empty() {
                    return Err(invalid(
                        "username",
                        "the user and the password must not be empty",
                    ));
                }
                if self.security == SmtpSecurity::None {
                    return Err(invalid(
                        "security",
                        "credentials are never sent over an unencrypted connection",
                    ));
                }
                if self.auth_mechanisms.is_empty() {
                    return Err(invalid("auth_mechanisms", "name at least one mechanism"));
                }
            }
            (Some(_), None) => return Err(invalid("password", "a user needs a password")),
            (None, Some(_)) => return Err(invalid("username", "a password needs a user")),
            (None, None) => {}
        }
        for pem in &self.root_certificates {
            if !pem.contains("-----BEGIN CERTIFICATE-----")
                || lettre::transport::smtp::client::Certificate::from_pem(pem.as_bytes()).is_err()
            {
                return Err(invalid("root_certificates", "not a PEM certificate"));
            }
        }
        Ok(())
    }
}
