//! STARTTLS, implicit TLS, AUTH, and the configuration refusals that pause the mailer.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{Clock, ErrorKind, MailErrorCode, MailOutcome, Mailer};
use outboxkit_smtp::{SmtpAuth, SmtpConfig, SmtpMailer, SmtpSecurity};
use outboxkit_testing::{ManualClock, SmtpStandIn};

use crate::{key, mail, mailer, plain, tls};

fn with_user(config: SmtpConfig, user: &str, password: &str) -> SmtpConfig {
    SmtpConfig {
        username: Some(user.into()),
        password: Some(password.into()),
        ..config
    }
}

#[tokio::test]
async fn starttls_encrypts_the_session_before_auth_and_mail() {
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "s3cret")
        .start()
        .await;
    let m = mailer(with_user(
        tls(&smtp, SmtpSecurity::StartTlsRequired),
        "app",
        "s3cret",
    ));
    m.send(&mail(), &key(1)).await.unwrap();
    let got = &smtp.messages()[0];
    assert!(got.encrypted);
    assert_eq!(got.user.as_deref(), Some("app"));
}

#[tokio::test]
async fn nothing_is_sent_in_clear_when_starttls_is_required_but_not_offered() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(SmtpConfig {
        security: SmtpSecurity::StartTlsRequired,
        ..plain(&smtp)
    });
    let e = m.send(&mail(), &key(1)).await.unwrap_err();
    assert_eq!(
        (e.code, e.outcome),
        (MailErrorCode::ConfigurationRefused, MailOutcome::NotSent)
    );
    assert_eq!(smtp.data_commands(), 0);
    assert!(smtp.messages().is_empty());
    assert!(!m.available(), "paused after a configuration refusal");
}

#[tokio::test]
async fn implicit_tls_encrypts_from_the_first_byte() {
    let smtp = SmtpStandIn::builder().implicit_tls().start().await;
    let m = mailer(tls(&smtp, SmtpSecurity::ImplicitTls));
    m.send(&mail(), &key(1)).await.unwrap();
    assert!(smtp.messages()[0].encrypted);
}

#[tokio::test]
async fn an_untrusted_certificate_is_a_configuration_refusal() {
    for (smtp, security) in [
        (
            SmtpStandIn::builder().starttls().start().await,
            SmtpSecurity::StartTlsRequired,
        ),
        (
            SmtpStandIn::builder().implicit_tls().start().await,
            SmtpSecurity::ImplicitTls,
        ),
    ] {
        let m = mailer(SmtpConfig {
            root_certificates: vec![],
            ..tls(&smtp, security)
        });
        let e = m.send(&mail(), &key(1)).await.unwrap_err();
        assert_eq!(
            (e.code, e.outcome),
            (MailErrorCode::ConfigurationRefused, MailOutcome::NotSent),
            "{security:?}: {e}"
        );
        assert!(smtp.messages().is_empty());
    }
}

#[tokio::test]
async fn auth_plain_and_auth_login_both_work() {
    for mechanism in [SmtpAuth::Plain, SmtpAuth::Login] {
        let smtp = SmtpStandIn::builder()
            .implicit_tls()
            .auth("app", "s3cret")
            .start()
            .await;
        let m = mailer(SmtpConfig {
            auth_mechanisms: vec![mechanism],
            ..with_user(tls(&smtp, SmtpSecurity::ImplicitTls), "app", "s3cret")
        });
        m.send(&mail(), &key(1)).await.unwrap();
        assert_eq!(
            smtp.messages()[0].user.as_deref(),
            Some("app"),
            "{mechanism:?}"
        );
    }
}

#[tokio::test]
async fn a_wrong_password_pauses_the_mailer_for_the_refusal_pause() {
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "s3cret")
        .start()
        .await;
    let clock = ManualClock::new();
    let m = SmtpMailer::with_clock(
        SmtpConfig {
            refusal_pause: Duration::from_secs(60),
            ..with_user(tls(&smtp, SmtpSecurity::StartTlsRequired), "app", "wrong")
        },
        clock.clone() as Arc<dyn Clock>,
    )
    .unwrap();
    assert!(m.available());
    let e = m.send(&mail(), &key(1)).await.unwrap_err();
    assert_eq!(
        (e.code, e.outcome),
        (MailErrorCode::ConfigurationRefused, MailOutcome::NotSent)
    );
    assert!(!e.detail.contains("wrong") && !format!("{m:?}").contains("wrong"));
    assert!(!m.available());
    clock.advance(Duration::from_secs(59));
    assert!(!m.available());
    clock.advance(Duration::from_secs(1));
    assert!(m.available());
    assert_eq!(smtp.data_commands(), 0);
}

#[tokio::test]
async fn a_server_without_auth_is_a_configuration_refusal_when_credentials_are_set() {
    let smtp = SmtpStandIn::builder().starttls().start().await;
    let m = mailer(with_user(
        tls(&smtp, SmtpSecurity::StartTlsRequired),
        "app",
        "s3cret",
    ));
    let e = m.send(&mail(), &key(1)).await.unwrap_err();
    assert_eq!(e.code, MailErrorCode::ConfigurationRefused);
    assert!(smtp.messages().is_empty());
}

#[tokio::test]
async fn check_connects_and_authenticates_without_sending() {
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "s3cret")
        .start()
        .await;
    let good = mailer(with_user(
        tls(&smtp, SmtpSecurity::StartTlsRequired),
        "app",
        "s3cret",
    ));
    good.check().await.unwrap();
    let bad = mailer(with_user(
        tls(&smtp, SmtpSecurity::StartTlsRequired),
        "app",
        "nope",
    ));
    assert_eq!(
        bad.check().await.unwrap_err().code,
        MailErrorCode::ConfigurationRefused
    );
    assert_eq!(smtp.data_commands(), 0);
}

#[tokio::test]
async fn credentials_over_clear_text_are_refused_at_construction() {
    let smtp = SmtpStandIn::start().await;
    let e = SmtpMailer::new(with_user(plain(&smtp), "app", "s3cret")).unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (ErrorKind::Misconfigured, Some("security"))
    );
}
