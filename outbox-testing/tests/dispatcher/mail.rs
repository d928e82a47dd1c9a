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
            |_c: outboxkit_dispatch::Context, _m: outboxkit_core::Message| async {
                outboxkit_dispatch::HandlerResult::Ok
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

/// A mailer that never answers: it records each call and then waits forever.
#[derive(Debug, Clone, Default)]
struct Hanging {
    calls: Arc<std::sync::atomic::AtomicUsize>,
    idempotent: bool,
}

#[async_trait::async_trait]
impl Mailer for Hanging {
    async fn send(
        &self,
        _m: &MailMessage,
        _k: &outboxkit_core::IdempotencyKey,
    ) -> Result<outboxkit_core::Accepted, outboxkit_core::MailError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending().await
    }

    fn capabilities(&self) -> outboxkit_core::MailCapabilities {
        outboxkit_core::MailCapabilities {
            idempotent: self.idempotent,
        }
    }
}

/// Run once with a hanging mailer: wait for the send to start, then move the clock past the
/// mail deadline (but not the lease) and return the report.
async fn run_past_the_mail_deadline(
    w: &crate::World,
    mailer: Hanging,
) -> outboxkit_dispatch::Report {
    let config = outboxkit_dispatch::DispatcherConfig {
        mail_timeout: Some(Duration::from_secs(5)),
        ..outboxkit_dispatch::DispatcherConfig::default()
    };
    let d = w
        .builder()
        .config(config)
        .mailer(Arc::new(mailer.clone()))
        .build()
        .unwrap();
    w.store.enqueue(message()).await.unwrap();
    let run = tokio::spawn({
        let d = d.clone();
        async move { d.run_once(BUDGET).await.unwrap() }
    });
    while mailer.calls.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    w.advance(Duration::from_secs(6));
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the send outlived its deadline")
        .unwrap()
}

#[tokio::test]
async fn a_hanging_mailer_is_cut_off_at_the_mail_deadline_as_an_unknown_outcome() {
    // Not idempotent: the mail may have gone out, so it is never sent again.
    let w = world();
    let r = run_past_the_mail_deadline(&w, Hanging::default()).await;
    assert_eq!(r.dead, 1, "{r}");
    let del = w.one().await;
    assert_eq!(
        (del.status, del.dead_reason),
        (DeliveryStatus::Dead, Some(DeadReason::UnknownOutcome))
    );
    let ledger = w.store.attempts(&w.tenant, del.id).await.unwrap();
    assert_eq!(
        ledger[0].record.outcome,
        outboxkit_core::AttemptOutcome::Failed(outboxkit_core::ErrorClass::MailUnknown)
    );

    // Idempotent: retried later with the same key.
    let w = world();
    let r = run_past_the_mail_deadline(
        &w,
        Hanging {
            idempotent: true,
            ..Hanging::default()
        },
    )
    .await;
    assert_eq!(r.retried, 1, "{r}");
    let del = w.one().await;
    assert_eq!((del.status, del.attempts), (DeliveryStatus::Pending, 1));
}

/// A dispatcher sending through `mail` whose idempotency keys start with `prefix`.
fn with_key_prefix(
    w: &crate::World,
    mail: &MailStandIn,
    prefix: &str,
) -> outboxkit_dispatch::Dispatcher {
    let config = outboxkit_dispatch::DispatcherConfig {
        mail_key_prefix: prefix.into(),
        ..outboxkit_dispatch::DispatcherConfig::default()
    };
    w.builder()
        .config(config)
        .mailer(Arc::new(mail.clone()))
        .build()
        .unwrap()
}

#[tokio::test]
async fn mail_keys_carry_the_installation_prefix_and_are_stable_across_retries() {
    let w = world();
    let mail = MailStandIn::new();
    mail.refuse(MailErrorCode::Unavailable, MailOutcome::NotSent);
    let d = with_key_prefix(&w, &mail, "shop-prod");
    w.store.enqueue(message()).await.unwrap();
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    mail.heal();
    w.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let del = w.one().await;
    let key = &mail.sent()[0].1;
    assert_eq!(key.as_str(), format!("shop-prod-{}", del.id));
    assert_eq!(
        mail.keys(),
        vec![key.clone(), key.clone()],
        "the same key on every attempt"
    );
}

#[tokio::test]
async fn two_installations_on_one_mail_account_never_share_a_key() {
    // One provider account (an idempotent stand-in shared by both apps); the same delivery
    // id in both stores (seeded alike): with distinct prefixes both mails go out.
    let mail = MailStandIn::idempotent();
    for prefix in ["app-a", "app-b"] {
        let w = world();
        let d = with_key_prefix(&w, &mail, prefix);
        w.store.enqueue(message()).await.unwrap();
        assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    }
    let sent = mail.sent();
    assert_eq!(sent.len(), 2, "neither send was taken for the other");
    assert_ne!(sent[0].1, sent[1].1);
}

#[test]
fn a_bad_mail_key_prefix_is_refused_by_name() {
    for bad in ["", "has space", "tab\t", "é", &"p".repeat(164)] {
        let config = outboxkit_dispatch::DispatcherConfig {
            mail_key_prefix: bad.to_owned(),
            ..outboxkit_dispatch::DispatcherConfig::default()
        };
        let e = config.validate().unwrap_err();
        assert_eq!(e.field(), Some("mail_key_prefix"), "{bad:?}: {e}");
    }
    let longest = outboxkit_dispatch::DispatcherConfig {
        mail_key_prefix: "p".repeat(163),
        ..outboxkit_dispatch::DispatcherConfig::default()
    };
    longest.validate().unwrap();
}
