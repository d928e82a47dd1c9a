//! The e-mail channel: refusal, healing, keys, crashes after `sending`, unavailability.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{
    mail::mail_idempotency_key, ClaimRequest, DeadReason, DeliveryStatus, MailErrorCode,
    MailMessage, MailOutcome, Mailer, NewMessage,
};
use outboxkit_testing::MailStandIn;

use crate::{world, BUDGET};

fn message() -> NewMessage {
    NewMessage::new(
        "invoice.sent",
        serde_json::json!({"subject": "Your invoice", "text": "Thanks"}),
    )
    .email("ada@example.com")
}

#[tokio::test]
async fn refused_then_healed_mail_is_sent_once_with_its_key() {
    let w = world();
    let mail = MailStandIn::new();
    mail.refuse(MailErrorCode::Unavailable, MailOutcome::NotSent);
    let d = w.builder().mailer(Arc::new(mail.clone())).build().unwrap();
    w.store.enqueue(message()).await.unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    mail.heal();
    w.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let sent = mail.sent();
    assert_eq!(sent.len(), 1);
    let del = w.one().await;
    assert_eq!(sent[0].1, mail_idempotency_key(del.id));
    assert_eq!(sent[0].0.to, "ada@example.com");
    assert_eq!(mail.attempts(), 2);
}

#[tokio::test]
async fn a_refused_message_is_dead() {
    let w = world();
    let mail = MailStandIn::new();
    mail.refuse(MailErrorCode::MessageRefused, MailOutcome::NotSent);
    let d = w.builder().mailer(Arc::new(mail)).build().unwrap();
    w.store.enqueue(message()).await.unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    assert_eq!(w.one().await.dead_reason, Some(DeadReason::MailRefused));
}

/// Claim the e-mail delivery, mark it `sending`, and "crash": the lease just expires.
async fn crash_after_marking_sending(w: &crate::World) {
    let claimed = w
        .store
        .claim(&ClaimRequest::new(10, Duration::from_secs(30)).email(8))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    w.store.mark_sending(&claimed[0].lease).await.unwrap();
    w.advance(Duration::from_secs(31));
}

#[tokio::test]
async fn a_send_found_after_a_crash_is_resent_only_through_an_idempotent_mailer() {
    // Not idempotent: dead, never sent again.
    let w = world();
    let mail = MailStandIn::new();
    let d = w.builder().mailer(Arc::new(mail.clone())).build().unwrap();
    w.store.enqueue(message()).await.unwrap();
    crash_after_marking_sending(&w).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    assert_eq!(w.one().await.dead_reason, Some(DeadReason::UnknownOutcome));
    assert_eq!(mail.attempts(), 0);

    // Idempotent: sent again with the same key, and the mail service deduplicates.
    let w = world();
    let mail = MailStandIn::idempotent();
    let d = w.builder().mailer(Arc::new(mail.clone())).build().unwrap();
    w.store.enqueue(message()).await.unwrap();
    let id = w.one().await.id;
    crash_after_marking_sending(&w).await;
    // The crashed worker's send had gone through.
    let m = MailMessage {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
        text: "Thanks".into(),
        html: None,
        reply_to: None,
        from_name: None,
    };
    mail.send(&m, &mail_idempotency_key(id)).await.unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    assert_eq!(mail.attempts(), 2);
    assert_eq!(mail.sent().len(), 1, "deduplicated by key");
}

#[tokio::test]
async fn an_unavailable_mailer_claims_nothing_and_spends_nothing() {
    let w = world();
    let mail = MailStandIn::new();
    mail.set_available(false);
    let d = w
        .builder()
        .mailer(Arc::new(mail.clone()))
        .handler(
            "h",
            "other.*",
            |_c: outboxkit_core::Context, _m: outboxkit_core::Message| async {
                outboxkit_core::HandlerResult::Ok
            },
        )
        .build()
        .unwrap();
    w.store.enqueue(message()).await.unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 0));
    mail.set_available(true);
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
}
