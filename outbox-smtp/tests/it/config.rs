//! Settings: the URL form, validation, and no secret in `Debug`.

use std::time::Duration;

use outboxkit_core::ErrorKind;
use outboxkit_smtp::{SmtpConfig, SmtpMailer, SmtpSecurity};

#[test]
fn urls_choose_tls_port_and_user() {
    let c = SmtpConfig::from_url("smtp://app@mail.example.com", "noreply@example.com").unwrap();
    assert_eq!(
        (c.host.as_str(), c.port, c.security, c.username.as_deref()),
        (
            "mail.example.com",
            587,
            SmtpSecurity::StartTlsRequired,
            Some("app")
        )
    );
    assert_eq!(c.from, "noreply@example.com");
    let c = SmtpConfig::from_url("smtps://a%40b@mail.example.com:2465", "x@example.com").unwrap();
    assert_eq!(
        (c.port, c.security, c.username.as_deref()),
        (2465, SmtpSecurity::ImplicitTls, Some("a@b"))
    );
    let c = SmtpConfig::from_url("smtp://a+b%2Bc@mail.example.com", "x@example.com").unwrap();
    assert_eq!(c.username.as_deref(), Some("a+b+c"));
    let c = SmtpConfig::from_url("smtp://localhost:25?tls=none", "x@example.com").unwrap();
    assert_eq!(
        (c.port, c.security, c.username),
        (25, SmtpSecurity::None, None)
    );
}

#[test]
fn bad_urls_are_invalid_input_naming_the_url() {
    for url in [
        "smtp://app:secret@mail.example.com",
        "http://mail.example.com",
        "smtp://",
        "mail.example.com",
        "smtp://mail.example.com/path",
        "smtps://mail.example.com?tls=none",
        "smtp://mail.example.com?tls=maybe",
    ] {
        let e = SmtpConfig::from_url(url, "x@example.com").unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::InvalidInput, Some("smtp_url")),
            "{url}"
        );
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}

#[test]
fn bad_settings_are_misconfigured_naming_the_field() {
    let good = SmtpConfig {
        host: "mail.example.com".into(),
        from: "noreply@example.com".into(),
        ..SmtpConfig::default()
    };
    SmtpMailer::new(good.clone()).unwrap();
    let rows: Vec<(SmtpConfig, &str)> = vec![
        (
            SmtpConfig {
                host: String::new(),
                ..good.clone()
            },
            "host",
        ),
        (
            SmtpConfig {
                port: 0,
                ..good.clone()
            },
            "port",
        ),
        (
            SmtpConfig {
                from: "nobody".into(),
                ..good.clone()
            },
            "from",
        ),
        (
            SmtpConfig {
                timeout: Duration::ZERO,
                ..good.clone()
            },
            "timeout",
        ),
        (
            SmtpConfig {
                hello_name: "a b".into(),
                ..good.clone()
            },
            "hello_name",
        ),
        (
            SmtpConfig {
                username: Some("u".into()),
                ..good.clone()
            },
            "password",
        ),
        (
            SmtpConfig {
                password: Some("p".into()),
                ..good.clone()
            },
            "username",
        ),
        (
            SmtpConfig {
                username: Some("u".into()),
                password: Some("p".into()),
                auth_mechanisms: vec![],
                ..good.clone()
            },
            "auth_mechanisms",
        ),
        (
            SmtpConfig {
                root_certificates: vec!["not pem".into()],
                ..good.clone()
            },
            "root_certificates",
        ),
    ];
    for (config, field) in rows {
        let e = SmtpMailer::new(config).unwrap_err();
        assert_eq!(
            (e.kind(), e.field()),
            (ErrorKind::Misconfigured, Some(field))
        );
    }
}

#[test]
fn debug_output_hides_the_password() {
    let c = SmtpConfig {
        host: "mail.example.com".into(),
        from: "noreply@example.com".into(),
        username: Some("app".into()),
        password: Some("hunter2".into()),
        ..SmtpConfig::default()
    };
    assert!(!format!("{c:?}").contains("hunter2"));
    assert!(!format!("{:?}", SmtpMailer::new(c).unwrap()).contains("hunter2"));
}
