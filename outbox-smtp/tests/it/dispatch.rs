//! The dispatcher sending e-mail through `SmtpMailer` to the stand-in: the verdict of each
//! outcome, the stable `Message-ID`, and an unknown outcome never sent twice.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::mail::mail_idempotency_key;
use outboxkit_core::{
    AttemptOutcome, DeadReason, Delivery, DeliveryFilter, DeliveryStatus, ErrorClass, NewMessage,
    PageRequest, Store, TenantId,
};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig, Timer};
use outboxkit_smtp::{SmtpConfig, SmtpMailer, SmtpSecurity};
use outboxkit_testing::memory::InMemoryStore;
use outboxkit_testing::{ManualClock, SeededEntropy, SmtpReply, SmtpStage, SmtpStandIn};

use crate::{plain, tls};

const BUDGET: Duration = Duration::from_secs(120);

struct World {
    clock: Arc<ManualClock>,
    store: Arc<dyn Store>,
}

fn world() -> World {
    let clock = ManualClock::new();
    let store: Arc<dyn Store> =
        Arc::new(InMemoryStore::new(clock.clone()).with_entropy(SeededEntropy::new(42)));
    World { clock, store }
}

impl World {
    fn dispatcher(&self, config: SmtpConfig) -> Dispatcher {
        let mailer = SmtpMailer::with_clock(config, self.clock.clone() as Arc<dyn Timer>).unwrap();
        Dispatcher::builder(self.store.clone())
            .clock(self.clock.clone() as Arc<dyn Timer>)
            .entropy(SeededEntropy::new(7))
            .config(DispatcherConfig {
                poll_interval: Duration::from_millis(50),
                ..DispatcherConfig::default()
            })
            .mailer(Arc::new(mailer))
            .build()
            .unwrap()
    }

    async fn enqueue(&self, to: &str) {
        let m = NewMessage::new(
            "invoice.sent",
            serde_json::json!({"subject": "Your invoice", "text": "Thanks"}),
        )
        .email(to);
        self.store.enqueue(m).await.unwrap();
    }

    async fn deliveries(&self) -> Vec<Delivery> {
        self.store
            .list_deliveries(
                &TenantId::default(),
                &DeliveryFilter::default(),
                PageRequest::first(100),
            )
            .await
            .unwrap()
            .items
    }

    async fn one(&self) -> Delivery {
        let all = self.deliveries().await;
        assert_eq!(all.len(), 1);
        all.into_iter().next().unwrap()
    }

    async fn last_outcome(&self, d: &Delivery) -> AttemptOutcome {
        let attempts = self
            .store
            .attempts(&TenantId::default(), d.id)
            .await
            .unwrap();
        attempts.last().unwrap().record.outcome
    }
}

fn message_id(d: &Delivery) -> String {
    format!("<{}@example.com>", mail_idempotency_key(d.id).as_str())
}

#[tokio::test]
async fn the_dispatcher_sends_mail_over_starttls_with_the_delivery_key_as_message_id() {
    let w = world();
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "pw")
        .start()
        .await;
    let d = w.dispatcher(SmtpConfig {
        username: Some("app".into()),
        password: Some("pw".into()),
        ..tls(&smtp, SmtpSecurity::StartTlsRequired)
    });
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let del = w.one().await;
    assert_eq!(del.status, DeliveryStatus::Succeeded);
    let got = smtp.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].to, vec!["ada@example.com".to_owned()]);
    assert_eq!(got[0].message_id(), Some(message_id(&del).as_str()));
    assert!(got[0].encrypted);
}

#[tokio::test]
async fn a_deferred_mail_is_retried_with_the_same_message_id() {
    let w = world();
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::EndOfData, SmtpReply::Code(451));
    let d = w.dispatcher(plain(&smtp));
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    assert_eq!(w.one().await.status, DeliveryStatus::Pending);
    w.clock.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let del = w.one().await;
    let received = smtp.received();
    assert_eq!(received.len(), 2, "the deferred data and the accepted one");
    for m in &received {
        assert_eq!(m.message_id(), Some(message_id(&del).as_str()));
    }
    assert_eq!(smtp.messages().len(), 1);
}

#[tokio::test]
async fn refusals_for_the_recipient_and_the_message_are_dead() {
    for (stage, code) in [(SmtpStage::RcptTo, 550), (SmtpStage::EndOfData, 554)] {
        let w = world();
        let smtp = SmtpStandIn::start().await;
        smtp.script(stage, SmtpReply::Code(code));
        let d = w.dispatcher(plain(&smtp));
        w.enqueue("ada@example.com").await;
        assert_eq!(
            d.run_once(BUDGET).await.unwrap().dead,
            1,
            "{stage:?} {code}"
        );
        let del = w.one().await;
        assert_eq!(del.dead_reason, Some(DeadReason::MailRefused));
        assert!(smtp.messages().is_empty());
    }
}

#[tokio::test]
async fn a_connection_lost_after_the_data_is_dead_unknown_and_never_resent() {
    let w = world();
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::EndOfData, SmtpReply::Drop);
    let d = w.dispatcher(plain(&smtp));
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    let del = w.one().await;
    assert_eq!(del.status, DeliveryStatus::Dead);
    assert_eq!(del.dead_reason, Some(DeadReason::UnknownOutcome));
    assert_eq!(
        w.last_outcome(&del).await,
        AttemptOutcome::Failed(ErrorClass::MailUnknown)
    );
    // Later runs do not send it again.
    w.clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
    assert_eq!(smtp.data_commands(), 1);
    assert_eq!(smtp.received().len(), 1);
}

#[tokio::test]
async fn through_an_idempotent_server_an_unknown_outcome_is_resent_with_the_same_message_id() {
    let w = world();
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::EndOfData, SmtpReply::Drop);
    let d = w.dispatcher(SmtpConfig {
        idempotent: true,
        ..plain(&smtp)
    });
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    w.clock.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().succeeded, 1);
    let del = w.one().await;
    let got = smtp.messages();
    assert_eq!(
        got.len(),
        2,
        "the server kept both; it deduplicates by Message-ID"
    );
    assert_eq!(got[0].message_id(), got[1].message_id());
    assert_eq!(got[0].message_id(), Some(message_id(&del).as_str()));
}

#[tokio::test]
async fn a_stalled_server_meets_the_deadline() {
    // Stalled before the data: retried. Stalled after it: maybe sent, dead.
    let w = world();
    let smtp = SmtpStandIn::start().await;
    smtp.script(SmtpStage::MailFrom, SmtpReply::Stall);
    smtp.script(SmtpStage::EndOfData, SmtpReply::Stall);
    let d = w.dispatcher(SmtpConfig {
        timeout: Duration::from_millis(1500),
        ..plain(&smtp)
    });
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().retried, 1);
    let del = w.one().await;
    assert_eq!(
        w.last_outcome(&del).await,
        AttemptOutcome::Failed(ErrorClass::MailNotSent)
    );
    w.clock.advance(Duration::from_secs(3600));
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    assert_eq!(w.one().await.dead_reason, Some(DeadReason::UnknownOutcome));
}

#[tokio::test]
async fn a_configuration_refusal_stops_claiming_mail_until_the_pause_ends() {
    let w = world();
    let smtp = SmtpStandIn::builder()
        .starttls()
        .auth("app", "pw")
        .start()
        .await;
    let d = w.dispatcher(SmtpConfig {
        username: Some("app".into()),
        password: Some("wrong".into()),
        refusal_pause: Duration::from_secs(60),
        ..tls(&smtp, SmtpSecurity::StartTlsRequired)
    });
    w.enqueue("ada@example.com").await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 1);
    assert_eq!(w.one().await.dead_reason, Some(DeadReason::MailRefused));
    // Paused: the next mail is not claimed and spends nothing.
    w.enqueue("bob@example.com").await;
    w.clock.advance(Duration::from_secs(30));
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 0);
    let waiting: Vec<_> = w
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].attempts, 0);
    // The pause ends: it is tried again.
    w.clock.advance(Duration::from_secs(30));
    assert_eq!(d.run_once(BUDGET).await.unwrap().claimed, 1);
    assert_eq!(smtp.data_commands(), 0);
}
