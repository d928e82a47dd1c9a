//! Dead letters: the observer event and the operator's alerts (webhook and e-mail), rate
//! limited and never in the way of the completion.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outboxkit_core::{
    DeadReason, DeliveryStatus, EndpointUrl, Message, SignedRequest, WebhookResponse,
    WebhookSecret, WebhookTransport,
};
use outboxkit_dispatch::{
    AlertEmail, AlertWebhook, Context, DeadLetterAlerts, DeadLetterEvent, HandlerResult, Observer,
};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_testing::{MailStandIn, WebhookReceiver};

use crate::{world, World, BUDGET};

fn loopback() -> Arc<HttpTransport> {
    Arc::new(
        HttpTransport::new(
            EgressPolicy::default()
                .allow_http(true)
                .allow_cidr("127.0.0.1/32")
                .unwrap(),
        )
        .unwrap(),
    )
}

/// A dispatcher whose handler discards everything, with these alerts and observer.
fn discarding(
    w: &World,
    alerts: Option<DeadLetterAlerts>,
    observer: Option<Arc<dyn Observer>>,
) -> outboxkit_dispatch::Dispatcher {
    let mut b = w
        .builder()
        .handler("strict", "*", |_c: Context, _m: Message| async {
            HandlerResult::discard("bad data")
        });
    if let Some(a) = alerts {
        b = b.dead_letter_alerts(a);
    }
    if let Some(o) = observer {
        b = b.observer(o);
    }
    b.build().unwrap()
}

#[derive(Debug, Default)]
struct Deaths(Mutex<Vec<(String, String, DeadReason, u32)>>);

impl Observer for Deaths {
    fn on_dead(&self, e: &DeadLetterEvent<'_>) {
        self.0.lock().unwrap().push((
            e.tenant.to_string(),
            e.topic.to_string(),
            e.reason,
            e.attempts,
        ));
    }
}

#[tokio::test]
async fn the_observer_hears_of_each_dead_letter() {
    let w = world();
    let deaths = Arc::new(Deaths::default());
    let d = discarding(&w, None, Some(deaths.clone()));
    d.register().await.unwrap();
    w.enqueue_n(2).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 2);
    let seen = deaths.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("default".into(), "a.b".into(), DeadReason::Permanent, 1),
            ("default".into(), "a.b".into(), DeadReason::Permanent, 1),
        ]
    );
}

#[tokio::test]
async fn operators_are_alerted_by_webhook_and_mail_at_most_once_per_interval() {
    let w = world();
    let receiver = WebhookReceiver::start()
        .await
        .unwrap()
        .with_clock(w.clock.clone());
    let secret = WebhookSecret::from_bytes(vec![7; 32]).unwrap();
    receiver.set_secrets(vec![secret.clone()]);
    let mail = MailStandIn::new();
    let alerts = DeadLetterAlerts {
        webhook: Some(AlertWebhook {
            url: EndpointUrl::parse(&receiver.url()).unwrap(),
            transport: loopback(),
            secret: Some(secret),
        }),
        email: Some(AlertEmail {
            to: "ops@example.com".into(),
            mailer: Arc::new(mail.clone()),
        }),
        min_interval: Duration::from_secs(300),
    };
    let d = discarding(&w, Some(alerts), None);
    d.register().await.unwrap();
    w.enqueue_n(3).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 3);
    assert!(receiver.wait_for(1, Duration::from_secs(10)).await);
    let first = receiver.requests()[0].clone();
    assert!(first.verified(), "the alert is signed");
    let body: serde_json::Value = serde_json::from_slice(&first.body).unwrap();
    assert_eq!(body["type"], "outbox.dead_letters");
    assert_eq!(body["data"]["count"], 3);
    assert_eq!(body["data"]["deliveries"][0]["reason"], "permanent");
    for _ in 0..500 {
        if !mail.sent().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let sent = mail.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0.to, "ops@example.com");
    assert!(sent[0].0.subject.contains('3'), "{}", sent[0].0.subject);
    assert!(
        !sent[0].0.text.contains("bad data"),
        "no payload or handler text in the alert"
    );

    // Within one long run, two more within the interval: gathered, not sent yet. (A run
    // that ends sends what it gathered: `run_once` here would send them at its end.)
    let (stop, run) = crate::spawn_run(&d);
    w.enqueue_n(2).await;
    wait_dead(&w, 5).await;
    assert!(
        !receiver.wait_for(2, Duration::from_millis(200)).await,
        "rate limited"
    );
    // When the interval has passed, one alert carries both.
    w.advance(Duration::from_secs(300));
    assert!(receiver.wait_for(2, Duration::from_secs(10)).await);
    let body: serde_json::Value = serde_json::from_slice(&receiver.requests()[1].body).unwrap();
    assert_eq!(body["data"]["count"], 2);
    assert_eq!(receiver.count(), 2);
    // One more, gathered for later; the run's end sends it rather than losing it.
    w.enqueue_n(1).await;
    wait_dead(&w, 6).await;
    assert!(
        !receiver.wait_for(3, Duration::from_millis(200)).await,
        "rate limited"
    );
    stop.send(()).unwrap();
    assert_eq!(run.await.unwrap().dead, 3);
    assert_eq!(receiver.count(), 3, "sent before the run returned");
    let body: serde_json::Value = serde_json::from_slice(&receiver.requests()[2].body).unwrap();
    assert_eq!(body["data"]["count"], 1);
}

async fn wait_dead(w: &World, n: usize) {
    for _ in 0..1000 {
        if w.count(DeliveryStatus::Dead).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("fewer than {n} deliveries went dead");
}

/// Answers 200 after a pause, keeping what it was sent.
#[derive(Debug, Default)]
struct SlowReceiver(Mutex<Vec<SignedRequest>>);

#[async_trait]
impl WebhookTransport for SlowReceiver {
    async fn send(&self, r: SignedRequest) -> WebhookResponse {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.0.lock().unwrap().push(r);
        WebhookResponse::Answered {
            status: 200,
            retry_after: None,
            excerpt: String::new(),
        }
    }
}

/// `relay --until-idle` and every `run_once` caller exit right after the run: the alert
/// must be out by then, not on a detached task the exit kills.
#[tokio::test]
async fn a_run_returns_only_once_the_alert_it_owes_is_sent() {
    let w = world();
    let receiver = Arc::new(SlowReceiver::default());
    let alerts = DeadLetterAlerts {
        webhook: Some(AlertWebhook {
            url: EndpointUrl::parse("https://alerts.example/hook").unwrap(),
            transport: receiver.clone(),
            secret: None,
        }),
        ..DeadLetterAlerts::default()
    };
    let d = discarding(&w, Some(alerts), None);
    d.register().await.unwrap();
    w.enqueue_n(2).await;
    assert_eq!(d.run_once(BUDGET).await.unwrap().dead, 2);
    let sent = receiver.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "the alert went out before run_once returned");
    let body: serde_json::Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(body["data"]["count"], 2);
}

/// A transport that never answers.
#[derive(Debug)]
struct Hanging;

#[async_trait]
impl WebhookTransport for Hanging {
    async fn send(&self, _r: SignedRequest) -> WebhookResponse {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_hanging_alert_never_fails_the_completion_and_holds_the_run_only_for_its_timeout() {
    let w = world();
    let alerts = DeadLetterAlerts {
        webhook: Some(AlertWebhook {
            url: EndpointUrl::parse("https://alerts.example/hook").unwrap(),
            transport: Arc::new(Hanging),
            secret: None,
        }),
        ..DeadLetterAlerts::default()
    };
    // The alert's timeout is the webhook timeout: a short one here.
    let d = w
        .builder()
        .config(outboxkit_dispatch::DispatcherConfig {
            poll_interval: Duration::from_millis(50),
            webhook_timeout: Duration::from_millis(300),
            ..outboxkit_dispatch::DispatcherConfig::default()
        })
        .handler("strict", "*", |_c: Context, _m: Message| async {
            HandlerResult::discard("bad data")
        })
        .dead_letter_alerts(alerts)
        .build()
        .unwrap();
    d.register().await.unwrap();
    w.enqueue_n(1).await;
    let r = tokio::time::timeout(Duration::from_secs(10), d.run_once(BUDGET))
        .await
        .expect("the alert held up the run")
        .unwrap();
    assert_eq!(r.dead, 1);
    let del = w.one().await;
    assert_eq!(
        (del.status, del.dead_reason),
        (DeliveryStatus::Dead, Some(DeadReason::Permanent))
    );
}

#[test]
fn alert_settings_are_checked_by_name() {
    let w = world();
    let bad = |a: DeadLetterAlerts| {
        w.builder()
            .handler("h", "*", |_c: Context, _m: Message| async {
                HandlerResult::Ok
            })
            .dead_letter_alerts(a)
            .build()
            .unwrap_err()
            .field()
    };
    assert_eq!(bad(DeadLetterAlerts::default()), Some("dead_letter_alerts"));
    let mail = Arc::new(MailStandIn::new());
    assert_eq!(
        bad(DeadLetterAlerts {
            email: Some(AlertEmail {
                to: "not an address".into(),
                mailer: mail.clone(),
            }),
            ..DeadLetterAlerts::default()
        }),
        Some("dead_letter_alerts.email")
    );
    assert_eq!(
        bad(DeadLetterAlerts {
            email: Some(AlertEmail {
                to: "ops@example.com".into(),
                mailer: mail,
            }),
            min_interval: Duration::ZERO,
            ..DeadLetterAlerts::default()
        }),
        Some("dead_letter_alerts.min_interval")
    );
}
