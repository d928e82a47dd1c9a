//! The e-mail channel: its seams (resolving a recipient to an address at send time,
//! composing the mail from a message) and the send path of one delivery.

use std::fmt;
use std::panic::AssertUnwindSafe;

use async_trait::async_trait;
use futures::FutureExt;

use super::attempt::{completed, context, gate, record, verdict_policy, Done, Gate, RunState};
use super::Shared;
use crate::timer::TimerExt;
use crate::ErrorKind;
use outboxkit_core::claim::Lease;
use outboxkit_core::error::Result;
use outboxkit_core::ids::{Recipient, TenantId};
use outboxkit_core::mail::{
    mail_from_payload, namespaced_mail_idempotency_key, MailError, MailErrorCode, MailMessage,
    MailOutcome, MailSent,
};
use outboxkit_core::model::{AttemptOutcome, AttemptRecord, Delivery, ErrorClass, Message};
use outboxkit_core::verdict::{classify, Outcome, Verdict};

/// Turns a stored recipient (an address, or a reference such as a user id) into an address
/// at send time, so the queue need not hold personal data.
///
/// # Contract
/// - `InvalidInput` or `NotFound` means the recipient will never resolve: the delivery dies
///   (`unrenderable`). Any other error is retried.
#[async_trait]
pub trait RecipientResolver: Send + Sync + fmt::Debug + 'static {
    /// The address of `recipient` in `tenant`.
    async fn resolve(&self, tenant: &TenantId, recipient: &Recipient) -> Result<String>;
}

/// The recipient is the address.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiteralRecipients;

#[async_trait]
impl RecipientResolver for LiteralRecipients {
    async fn resolve(&self, _tenant: &TenantId, recipient: &Recipient) -> Result<String> {
        Ok(recipient.as_str().to_owned())
    }
}

/// Builds the e-mail of a message.
pub trait MailComposer: Send + Sync + fmt::Debug + 'static {
    /// The mail of `message` for the address `to`; an error makes the delivery dead
    /// (`unrenderable`).
    fn compose(&self, message: &Message, to: String) -> Result<MailMessage>;
}

/// Reads the payload as `{"subject", "text", "html"?, "reply_to"?, "from_name"?}`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PayloadComposer;

impl MailComposer for PayloadComposer {
    fn compose(&self, message: &Message, to: String) -> Result<MailMessage> {
        mail_from_payload(&message.payload, to)
    }
}

pub(super) async fn email_path(
    shared: &Shared,
    run: &RunState,
    lease: Lease,
    delivery: &Delivery,
    message: &Message,
    recipient: &Recipient,
) -> Done {
    let Some(ch) = &shared.mail else {
        return Done::release(lease, shared.config.poll_interval);
    };
    let now = shared.clock.now();
    let idempotent = ch.mailer.capabilities().idempotent;
    let policy = verdict_policy(shared, ch.policy.for_tenant(&delivery.tenant), idempotent);
    let fail = |lease: Lease, outcome: Outcome, text: &str| {
        let verdict = classify(&outcome, &context(shared, &lease), &policy);
        completed(
            lease,
            verdict,
            record(&outcome, now, now, text),
            delivery,
            now,
            now,
        )
    };
    if lease.was_sending() && !idempotent {
        let rec = AttemptRecord {
            detail: None,
            started_at: now,
            finished_at: now,
            outcome: AttemptOutcome::Failed(ErrorClass::MailUnknown),
            status_code: None,
            excerpt: Some(
                "an earlier send may have happened and the mailer is not idempotent".into(),
            ),
        };
        return completed(
            lease,
            Verdict::Dead {
                reason: outboxkit_core::model::DeadReason::UnknownOutcome,
            },
            Some(rec),
            delivery,
            now,
            now,
        );
    }
    let to = match ch.resolver.resolve(&delivery.tenant, recipient).await {
        Ok(a) => a,
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::NotFound) => {
            // The recipient itself is never logged: it may be an address.
            tracing::warn!(error = %e, "the recipient does not resolve; the delivery dies");
            return fail(
                lease,
                Outcome::Unrenderable,
                "the recipient does not resolve",
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "resolving the recipient failed; retrying later");
            let err = MailError::new(
                MailErrorCode::Other,
                MailOutcome::NotSent,
                "recipient lookup failed",
            );
            return fail(lease, Outcome::Mail(Err(err)), "recipient lookup failed");
        }
    };
    let mail = match ch.composer.compose(message, to) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(error = %e, "composing the mail failed; the delivery dies");
            return fail(
                lease,
                Outcome::Unrenderable,
                "the message cannot be rendered as an e-mail",
            );
        }
    };
    if let Gate::Release(delay) = gate(shared, run, shared.config.mail_deadline(), None) {
        return Done::release(lease, delay);
    }
    // Validated with the configuration: never fails here.
    let key = match namespaced_mail_idempotency_key(&shared.config.mail_key_prefix, delivery.id) {
        Ok(k) => k,
        Err(e) => {
            tracing::error!(error = %e, "the mail key prefix is invalid; releasing the delivery");
            return Done::release(lease, shared.config.park_delay);
        }
    };
    match shared.store.mark_sending(&lease).await {
        Ok(()) => {}
        Err(e) if e.is_lease_lost() => return Done::LeaseLost,
        Err(e) => {
            tracing::warn!(error = %e, "marking the delivery as sending failed; releasing it");
            return Done::release(lease, shared.config.poll_interval);
        }
    }
    let started = shared.clock.now();
    let unknown = |detail: &str| MailSent {
        result: Err(MailError::new(
            MailErrorCode::Timeout,
            MailOutcome::Unknown,
            detail,
        )),
        detail: None,
    };
    let MailSent { result, detail } = tokio::select! {
        // A mailer that panics spends the attempt (the mail may have gone out).
        r = AssertUnwindSafe(ch.mailer.send_detailed(&mail, &key)).catch_unwind() => r.unwrap_or_else(|_| {
            tracing::error!("the mailer panicked");
            MailSent {
                result: Err(MailError::new(
                    MailErrorCode::Other,
                    MailOutcome::Unknown,
                    "the mailer panicked",
                )),
                detail: None,
            }
        }),
        // Abandoned mid-call: the mail may have gone out.
        () = shared.clock.sleep(shared.config.mail_deadline()) => {
            unknown("the mailer did not answer before the mail deadline")
        }
    };
    let finished = shared.clock.now();
    let text = match &result {
        Ok(_) => String::new(),
        Err(e) => e.detail.clone(),
    };
    let outcome = Outcome::Mail(result.map(|_| ()));
    let verdict = classify(&outcome, &context(shared, &lease), &policy);
    let mut rec = record(&outcome, started, finished, &text);
    if let Some(r) = &mut rec {
        r.detail = detail;
    }
    completed(lease, verdict, rec, delivery, started, finished)
}
