//! Each answer of the server, at each stage, into the mail outcomes.

use std::time::Duration;

use outboxkit_core::{MailErrorCode, MailOutcome, Mailer};
use outboxkit_smtp::SmtpConfig;
use outboxkit_testing::{SmtpReply, SmtpStage, SmtpStandIn};

use crate::{key, mail, mailer, plain};

#[tokio::test]
async fn an_accepted_mail_is_recorded_with_its_envelope_headers_and_message_id() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(SmtpConfig {
        from_name: Some("Shop".into()),
        ..plain(&smtp)
    });
    let mut message = mail();
    message.reply_to = Some("help@example.com".into());
    let accepted = m.send(&message, &key(1)).await.unwrap();
    assert_eq!(
        accepted.provider_id.as_deref(),
        Some("ok queued as standin")
    );
    let got = smtp.messages();
    assert_eq!(got.len(), 1);
    let got = &got[0];
    assert_eq!(got.from, "noreply@example.com");
    assert_eq!(got.to, vec!["ada@example.com".to_owned()]);
    assert_eq!(got.header("subject"), Some("Your invoice"));
    assert_eq!(got.header("from"), Some("Shop <noreply@example.com>"));
    assert_eq!(got.header("to"), Some("ada@example.com"));
    assert_eq!(got.header("reply-to"), Some("help@example.com"));
    assert_eq!(
        got.message_id(),
        Some(format!("<{}@example.com>", key(1).as_str()).as_str())
    );
    assert!(got.body.contains("Thanks for your order."), "{}", got.body);
    assert!(!got.encrypted);
}

#[tokio::test]
async fn a_detailed_send_keeps_the_servers_final_reply_and_no_address() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(plain(&smtp));
    let sent = m.send_detailed(&mail(), &key(2)).await;
    assert!(sent.result.is_ok());
    let d = sent.detail.expect("a detail");
    assert_eq!(d.response_text(), "250 ok queued as standin");
    assert!(
        d.request_headers.is_empty(),
        "the mail's headers carry addresses"
    );
    assert!(!d.response_text().contains("ada@example.com"));
}

#[tokio::test]
async fn an_html_mail_is_multipart_alternative() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(plain(&smtp));
    let mut message = mail();
    message.html = Some("<p>Thanks</p>".into());
    m.send(&message, &key(1)).await.unwrap();
    let got = &smtp.messages()[0];
    assert!(got
        .header("content-type")
        .unwrap()
        .starts_with("multipart/alternative"));
    assert!(got.body.contains("<p>Thanks</p>"));
    assert!(got.body.contains("Thanks for your order."));
}

/// One send against a stand-in answering `reply` at `stage` once; the error's code and
/// outcome, and how many messages the stand-in accepted.
async fn once(stage: SmtpStage, reply: SmtpReply) -> (MailErrorCode, MailOutcome, usize) {
    let smtp = SmtpStandIn::start().await;
    // A short deadline only where the stand-in stalls (the steps before must fit in it).
    let timeout = if reply == SmtpReply::Stall {
        Duration::from_millis(1500)
    } else {
        Duration::from_secs(10)
    };
    smtp.script(stage, reply);
    let m = mailer(SmtpConfig {
        timeout,
        ..plain(&smtp)
    });
    let e = m.send(&mail(), &key(1)).await.unwrap_err();
    assert!(!e.detail.contains("ada@"), "no address in {e}");
    (e.code, e.outcome, smtp.messages().len())
}

#[tokio::test]
async fn transient_4xx_answers_are_retried_not_sent() {
    use SmtpStage as S;
    for (stage, code) in [
        (S::Connect, 421),
        (S::Ehlo, 421),
        (S::MailFrom, 451),
        (S::RcptTo, 450),
        (S::RcptTo, 451),
        (S::RcptTo, 452),
        (S::Data, 451),
        (S::EndOfData, 421),
        (S::EndOfData, 451),
        (S::EndOfData, 452),
    ] {
        assert_eq!(
            once(stage, SmtpReply::Code(code)).await,
            (MailErrorCode::Unavailable, MailOutcome::NotSent, 0),
            "{stage:?} {code}"
        );
    }
}

#[tokio::test]
async fn permanent_answers_for_the_recipient_refuse_the_message() {
    for code in [550, 551, 553] {
        assert_eq!(
            once(SmtpStage::RcptTo, SmtpReply::Code(code)).await,
            (MailErrorCode::MessageRefused, MailOutcome::NotSent, 0),
            "{code}"
        );
    }
}

#[tokio::test]
async fn permanent_answers_for_the_message_refuse_it() {
    for (stage, code) in [
        (SmtpStage::EndOfData, 552),
        (SmtpStage::EndOfData, 554),
        (SmtpStage::Data, 554),
    ] {
        assert_eq!(
            once(stage, SmtpReply::Code(code)).await,
            (MailErrorCode::MessageRefused, MailOutcome::NotSent, 0),
            "{stage:?} {code}"
        );
    }
}

#[tokio::test]
async fn a_permanent_answer_to_the_sender_is_a_configuration_refusal() {
    assert_eq!(
        once(SmtpStage::MailFrom, SmtpReply::Code(550)).await,
        (MailErrorCode::ConfigurationRefused, MailOutcome::NotSent, 0)
    );
}

#[tokio::test]
async fn a_connection_lost_before_the_data_is_not_sent() {
    for stage in [
        SmtpStage::Connect,
        SmtpStage::Ehlo,
        SmtpStage::MailFrom,
        SmtpStage::RcptTo,
        SmtpStage::Data,
    ] {
        assert_eq!(
            once(stage, SmtpReply::Drop).await,
            (MailErrorCode::Unavailable, MailOutcome::NotSent, 0),
            "{stage:?}"
        );
    }
}

#[tokio::test]
async fn a_connection_lost_after_the_data_is_unknown() {
    // The stand-in kept the message and went away before answering.
    assert_eq!(
        once(SmtpStage::EndOfData, SmtpReply::Drop).await,
        (MailErrorCode::Unavailable, MailOutcome::Unknown, 1)
    );
}

#[tokio::test]
async fn the_deadline_before_the_data_is_not_sent_and_after_it_unknown() {
    for stage in [SmtpStage::Connect, SmtpStage::MailFrom, SmtpStage::Data] {
        assert_eq!(
            once(stage, SmtpReply::Stall).await,
            (MailErrorCode::Timeout, MailOutcome::NotSent, 0),
            "{stage:?}"
        );
    }
    assert_eq!(
        once(SmtpStage::EndOfData, SmtpReply::Stall).await,
        (MailErrorCode::Timeout, MailOutcome::Unknown, 0)
    );
}

#[tokio::test]
async fn a_refused_server_is_unavailable_not_sent() {
    let port = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    };
    let smtp = SmtpStandIn::start().await;
    let m = mailer(SmtpConfig {
        port,
        ..plain(&smtp)
    });
    let e = m.send(&mail(), &key(1)).await.unwrap_err();
    assert_eq!(
        (e.code, e.outcome),
        (MailErrorCode::Unavailable, MailOutcome::NotSent)
    );
    assert!(
        m.available(),
        "an unreachable server is not a configuration error"
    );
}

#[tokio::test]
async fn connections_are_reused_and_a_stale_one_is_replaced_before_sending() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(plain(&smtp));
    m.send(&mail(), &key(1)).await.unwrap();
    m.send(&mail(), &key(2)).await.unwrap();
    assert_eq!(
        smtp.connections(),
        1,
        "the second mail reused the connection"
    );
    // The server drops the pooled connection when the next mail starts.
    smtp.script(SmtpStage::MailFrom, SmtpReply::Drop);
    m.send(&mail(), &key(3)).await.unwrap();
    assert_eq!(smtp.connections(), 2);
    assert_eq!(smtp.messages().len(), 3);
    // After a refusal the mailer heals with the server.
    smtp.refuse(SmtpStage::RcptTo, 550);
    assert!(m.send(&mail(), &key(4)).await.is_err());
    smtp.heal();
    m.send(&mail(), &key(5)).await.unwrap();
    assert_eq!(smtp.messages().len(), 4);
}

#[tokio::test]
async fn a_pool_of_zero_closes_each_connection() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(SmtpConfig {
        pool_size: 0,
        ..plain(&smtp)
    });
    m.send(&mail(), &key(1)).await.unwrap();
    m.send(&mail(), &key(2)).await.unwrap();
    assert_eq!(smtp.connections(), 2);
}

#[tokio::test]
async fn a_bad_recipient_address_is_refused_without_connecting() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(plain(&smtp));
    let mut message = mail();
    message.to = "not an address".into();
    let e = m.send(&message, &key(1)).await.unwrap_err();
    assert_eq!(
        (e.code, e.outcome),
        (MailErrorCode::MessageRefused, MailOutcome::NotSent)
    );
    assert!(!e.detail.contains("not an address"));
    assert_eq!(smtp.connections(), 0);
}

#[tokio::test]
async fn hostile_subjects_and_bodies_cannot_change_the_envelope_or_headers() {
    let smtp = SmtpStandIn::start().await;
    let m = mailer(plain(&smtp));
    let mut message = mail();
    message.subject = "Hi\r\nBcc: eve@example.com".into();
    message.text = "line\r\n.\r\nMAIL FROM:<eve@example.com>\r\n.".into();
    m.send(&message, &key(1)).await.unwrap();
    let got = smtp.messages();
    assert_eq!(got.len(), 1, "one message, not two");
    assert_eq!(got[0].to, vec!["ada@example.com".to_owned()]);
    assert_eq!(got[0].header("bcc"), None);
    assert!(
        got[0].body.contains("MAIL FROM:<eve@example.com>"),
        "{}",
        got[0].body
    );
    assert_eq!(smtp.data_commands(), 1);
}
