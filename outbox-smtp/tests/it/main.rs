//! outboxkit-smtp against the loopback `SmtpStandIn` only: no traffic leaves the machine.

mod classify;
mod config;
mod dispatch;
mod tls;

use std::time::Duration;

use outboxkit_core::{IdempotencyKey, MailMessage};
use outboxkit_smtp::{SmtpConfig, SmtpMailer, SmtpSecurity};
use outboxkit_testing::SmtpStandIn;

/// Settings for a stand-in: clear text, no AUTH, a short deadline.
pub fn plain(smtp: &SmtpStandIn) -> SmtpConfig {
    SmtpConfig {
        host: "127.0.0.1".into(),
        port: smtp.port(),
        security: SmtpSecurity::None,
        from: "noreply@example.com".into(),
        timeout: Duration::from_secs(10),
        ..SmtpConfig::default()
    }
}

/// Settings for a TLS stand-in: its certificate trusted, the host `localhost`.
pub fn tls(smtp: &SmtpStandIn, security: SmtpSecurity) -> SmtpConfig {
    SmtpConfig {
        host: "localhost".into(),
        security,
        root_certificates: smtp
            .certificate_pem()
            .map(str::to_owned)
            .into_iter()
            .collect(),
        ..plain(smtp)
    }
}

pub fn mailer(config: SmtpConfig) -> SmtpMailer {
    SmtpMailer::new(config).unwrap()
}

pub fn mail() -> MailMessage {
    MailMessage {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
        text: "Thanks for your order.".into(),
        html: None,
        reply_to: None,
        from_name: None,
    }
}

pub fn key(n: u32) -> IdempotencyKey {
    IdempotencyKey::new(format!("outbox-0190000{n}-0000-7000-8000-000000000001")).unwrap()
}
