//! Dead-letter alerts (seed 001): the operator hears that deliveries went dead, by a webhook
//! POST and/or an e-mail, at most once per interval, without ever delaying or failing the
//! completion that made them dead.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::timer::DynTimer;
use outboxkit_core::endpoint::EndpointUrl;
use outboxkit_core::error::{Error, Result};
use outboxkit_core::ids::{DeliveryId, MessageId, TenantId, Topic};
use outboxkit_core::mail::{namespaced_mail_idempotency_key, DynMailer, MailMessage};
use outboxkit_core::model::{DeadReason, DestinationKind};
use outboxkit_core::signing::{sign, HeaderNames, WebhookSecret};
use outboxkit_core::time::{DynEntropy, Timestamp};
use outboxkit_core::transport::{DynWebhookTransport, SignedRequest, WebhookResponse};

/// The most deliveries one alert lists; the rest are counted.
pub const ALERT_LIST_LIMIT: usize = 25;

/// Where dead-letter alerts go, and how often at most.
///
/// Alerts are best effort: a failed or slow alert is logged and dropped, never retried and
/// never in the way of a delivery's completion; the ledger remains the record. A run does
/// not return before the alerts it owes are sent or have failed (each bounded by the
/// webhook timeout): what it gathered for a later alert is sent when it ends, since the
/// process may end with it, so `min_interval` spaces the alerts within one run. Deliveries
/// the store discards at claim time (their budget spent before this dispatcher saw them)
/// are not alerted.
#[derive(Clone)]
pub struct DeadLetterAlerts {
    /// POST a signed summary here.
    pub webhook: Option<AlertWebhook>,
    /// Mail a summary here.
    pub email: Option<AlertEmail>,
    /// At most one alert per interval; deaths in between are gathered into the next one.
    /// 1 s to 1 day. Default 5 min.
    pub min_interval: Duration,
}

impl Default for DeadLetterAlerts {
    fn default() -> Self {
        DeadLetterAlerts {
            webhook: None,
            email: None,
            min_interval: Duration::from_secs(300),
        }
    }
}

impl fmt::Debug for DeadLetterAlerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetterAlerts")
            .field("webhook", &self.webhook.is_some())
            .field("email", &self.email.is_some())
            .field("min_interval", &self.min_interval)
            .finish()
    }
}

/// A webhook for alerts: the URL, the transport to send with (its egress policy applies),
/// and an optional secret to sign with (Standard Webhooks).
#[derive(Clone)]
pub struct AlertWebhook {
    /// Where.
    pub url: EndpointUrl,
    /// How.
    pub transport: Arc<DynWebhookTransport>,
    /// Sign with this secret, if given.
    pub secret: Option<WebhookSecret>,
}

/// An e-mail address for alerts and the mailer to send with.
#[derive(Clone)]
pub struct AlertEmail {
    /// The operator's address.
    pub to: String,
    /// How.
    pub mailer: Arc<DynMailer>,
}

impl fmt::Debug for AlertWebhook {
    // The URL may carry a token and the secret is secret: neither in debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlertWebhook")
            .field("signed", &self.secret.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for AlertEmail {
    // An address is personal data: never in debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlertEmail").finish_non_exhaustive()
    }
}

impl DeadLetterAlerts {
    /// Check the settings (`Misconfigured`, naming the field).
    pub fn validate(&self) -> Result<()> {
        if self.webhook.is_none() && self.email.is_none() {
            return Err(Error::misconfigured(
                "dead_letter_alerts",
                "name a webhook, an e-mail address, or both",
            ));
        }
        if let Some(e) = &self.email {
            let ok = e.to.len() <= 254
                && e.to
                    .split_once('@')
                    .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty())
                && e.to.bytes().all(|b| b.is_ascii_graphic() || b >= 0x80);
            if !ok {
                return Err(Error::misconfigured(
                    "dead_letter_alerts.email",
                    "is not an e-mail address",
                ));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&self.min_interval) {
            return Err(Error::misconfigured(
                "dead_letter_alerts.min_interval",
                "must be between 1 s and 1 day",
            ));
        }
        Ok(())
    }
}

/// One delivery that went dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeadItem {
    pub(crate) delivery_id: DeliveryId,
    pub(crate) tenant: TenantId,
    pub(crate) topic: Topic,
    pub(crate) kind: DestinationKind,
    pub(crate) reason: DeadReason,
    pub(crate) attempts: u32,
}

#[derive(Debug, Default)]
struct Gathered {
    items: Vec<DeadItem>,
    count: u64,
    last_sent: Option<Timestamp>,
    scheduled: bool,
}

/// Gathers dead letters and sends alerts in the background.
pub(crate) struct Alerter {
    config: DeadLetterAlerts,
    clock: Arc<DynTimer>,
    entropy: Arc<DynEntropy>,
    names: HeaderNames,
    mail_key_prefix: String,
    timeout: Duration,
    state: Mutex<Gathered>,
    /// Held while an alert is taken from the gathered state and sent, so a flush waits for
    /// an alert already on its way instead of returning before it is sent.
    sending: tokio::sync::Mutex<()>,
}

impl fmt::Debug for Alerter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Alerter")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Alerter {
    pub(crate) fn new(
        config: DeadLetterAlerts,
        clock: Arc<DynTimer>,
        entropy: Arc<DynEntropy>,
        names: HeaderNames,
        mail_key_prefix: String,
        timeout: Duration,
    ) -> Self {
        Alerter {
            config,
            clock,
            entropy,
            names,
            mail_key_prefix,
            timeout,
            state: Mutex::new(Gathered::default()),
            sending: tokio::sync::Mutex::new(()),
        }
    }

    /// Note a dead delivery; an alert goes out now, or when the interval since the last one
    /// has passed. Never waits.
    pub(crate) fn dead(self: &Arc<Self>, item: DeadItem) {
        let now = self.clock.now();
        let due = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.count += 1;
            if s.items.len() < ALERT_LIST_LIMIT {
                s.items.push(item);
            }
            if s.scheduled {
                return;
            }
            s.scheduled = true;
            s.last_sent
                .map_or(now, |l| l.saturating_add(self.config.min_interval))
                .max(now)
        };
        let me = self.clone();
        tokio::spawn(async move {
            me.clock.sleep_until(due).await;
            let _sending = me.sending.lock().await;
            let (items, count) = me.take(true);
            if count > 0 {
                me.send(&items, count).await;
            }
        });
    }

    /// Take what is gathered, marking it sent now when there is any. `wake`: the scheduled
    /// alert is running (the next death schedules a new one).
    fn take(&self, wake: bool) -> (Vec<DeadItem>, u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if wake {
            s.scheduled = false;
        }
        if s.count > 0 {
            s.last_sent = Some(self.clock.now());
        }
        (std::mem::take(&mut s.items), std::mem::take(&mut s.count))
    }

    /// Send what is owed before a run returns: wait for an alert already on its way, and
    /// send the deaths gathered for a later alert now, since the process may end with the
    /// run. Each send is bounded by the alert timeout; a failure is logged, as always.
    pub(crate) async fn flush(&self) {
        let _sending = self.sending.lock().await;
        let (items, count) = self.take(false);
        if count > 0 {
            self.send(&items, count).await;
        }
    }

    async fn send(&self, items: &[DeadItem], count: u64) {
        let now = self.clock.now();
        let alert_id = MessageId::generate(now, &*self.entropy);
        if let Some(w) = &self.config.webhook {
            let body = webhook_body(items, count, now);
            let id = format!("alert_{alert_id}");
            let ts = now.as_unix_seconds();
            let mut headers = vec![
                (self.names.id.clone(), id.clone()),
                (self.names.timestamp.clone(), ts.to_string()),
                ("content-type".to_owned(), "application/json".to_owned()),
            ];
            if let Some(secret) = &w.secret {
                headers.push((
                    self.names.signature.clone(),
                    sign(&[secret], &id, ts, &body),
                ));
            }
            let request = SignedRequest {
                url: w.url.clone(),
                headers,
                body,
                timeout: self.timeout,
            };
            // The transport applies the timeout; this bounds one that does not.
            let response = tokio::time::timeout(self.timeout, w.transport.send(request)).await;
            let accepted = matches!(
                response,
                Ok(WebhookResponse::Answered { status, .. }) if (200..300).contains(&status)
            );
            if !accepted {
                tracing::warn!(count, "the dead-letter alert webhook was not accepted");
            }
        }
        if let Some(e) = &self.config.email {
            let mail = MailMessage {
                to: e.to.clone(),
                subject: format!("outbox: {count} deliveries went dead"),
                text: mail_text(items, count),
                html: None,
                reply_to: None,
                from_name: None,
            };
            let key = namespaced_mail_idempotency_key(
                &self.mail_key_prefix,
                DeliveryId::generate(now, &*self.entropy),
            );
            let sent = match key {
                Ok(key) => tokio::time::timeout(self.timeout, e.mailer.send(&mail, &key))
                    .await
                    .map(|r| r.is_ok())
                    .unwrap_or(false),
                Err(_) => false,
            };
            if !sent {
                tracing::warn!(count, "the dead-letter alert e-mail was not sent");
            }
        }
    }
}

fn webhook_body(items: &[DeadItem], count: u64, now: Timestamp) -> Vec<u8> {
    let deliveries: Vec<serde_json::Value> = items
        .iter()
        .map(|i| {
            serde_json::json!({
                "delivery_id": i.delivery_id.to_string(),
                "tenant": i.tenant.as_str(),
                "topic": i.topic.as_str(),
                "channel": i.kind.as_str(),
                "reason": i.reason.as_str(),
                "attempts": i.attempts,
            })
        })
        .collect();
    let omitted = count.saturating_sub(items.len() as u64);
    serde_json::to_vec(&serde_json::json!({
        "type": "outbox.dead_letters",
        "timestamp": now.to_rfc3339(),
        "data": { "count": count, "deliveries": deliveries, "omitted": omitted },
    }))
    .unwrap_or_default()
}

fn mail_text(items: &[DeadItem], count: u64) -> String {
    let mut text = format!("{count} deliveries went dead.\n\n");
    for i in items {
        text.push_str(&format!(
            "{} tenant {} topic {} ({}): {} after {} attempts\n",
            i.delivery_id,
            i.tenant,
            i.topic,
            i.kind.as_str(),
            i.reason.as_str(),
            i.attempts
        ));
    }
    let omitted = count.saturating_sub(items.len() as u64);
    if omitted > 0 {
        text.push_str(&format!("and {omitted} more\n"));
    }
    text.push_str(
        "\nRead the ledger (outbox deliveries list --status dead) and replay when fixed.\n",
    );
    text
}
