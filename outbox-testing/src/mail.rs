//! `MailStandIn`: a mailer for tests that records messages, refuses and heals on command,
//! and deduplicates by key when idempotent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use outboxkit_core::{
    Accepted, IdempotencyKey, MailCapabilities, MailError, MailErrorCode, MailMessage, MailOutcome,
    Mailer,
};

/// A [`Mailer`] that records what it accepts. Clones share the record.
///
/// - [`MailStandIn::new`] does not deduplicate: two sends with one key are two e-mails.
/// - [`MailStandIn::idempotent`] deduplicates by key: a second send with a key it already
///   accepted answers `Accepted` (with the same provider id) and records nothing new.
/// - [`MailStandIn::refuse`] makes every send fail with a code and outcome until
///   [`MailStandIn::heal`]; a refused send records nothing.
///
/// ```
/// use outboxkit_core::{MailErrorCode, MailOutcome, Mailer};
/// use outboxkit_testing::MailStandIn;
///
/// let mail = MailStandIn::idempotent();
/// assert!(mail.capabilities().idempotent);
/// mail.refuse(MailErrorCode::Unavailable, MailOutcome::NotSent);
/// mail.heal();
/// assert!(mail.sent().is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct MailStandIn {
    idempotent: bool,
    state: Arc<Mutex<Outbox>>,
}

#[derive(Debug)]
struct Outbox {
    refusal: Option<(MailErrorCode, MailOutcome)>,
    available: bool,
    sent: Vec<(MailMessage, IdempotencyKey)>,
    accepted: HashMap<IdempotencyKey, String>,
    attempts: usize,
    keys: Vec<IdempotencyKey>,
}

impl MailStandIn {
    fn with(idempotent: bool) -> Self {
        MailStandIn {
            idempotent,
            state: Arc::new(Mutex::new(Outbox {
                refusal: None,
                available: true,
                sent: Vec::new(),
                accepted: HashMap::new(),
                attempts: 0,
                keys: Vec::new(),
            })),
        }
    }

    /// A mailer that does not deduplicate.
    pub fn new() -> Self {
        Self::with(false)
    }

    /// A mailer that deduplicates by idempotency key.
    pub fn idempotent() -> Self {
        Self::with(true)
    }

    fn state(&self) -> MutexGuard<'_, Outbox> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fail every send with `code` and `outcome` until [`MailStandIn::heal`].
    pub fn refuse(&self, code: MailErrorCode, outcome: MailOutcome) {
        self.state().refusal = Some((code, outcome));
    }

    /// Accept sends again.
    pub fn heal(&self) {
        self.state().refusal = None;
    }

    /// What [`Mailer::available`] answers (true by default). An unavailable stand-in also
    /// fails sends as `unavailable`, not sent.
    pub fn set_available(&self, available: bool) {
        self.state().available = available;
    }

    /// The messages accepted, each with its key, in order.
    pub fn sent(&self) -> Vec<(MailMessage, IdempotencyKey)> {
        self.state().sent.clone()
    }

    /// How many times `send` was called (refused, deduplicated and accepted alike).
    pub fn attempts(&self) -> usize {
        self.state().attempts
    }

    /// The key of every `send` call (refused, deduplicated and accepted alike), in order.
    pub fn keys(&self) -> Vec<IdempotencyKey> {
        self.state().keys.clone()
    }
}

impl Default for MailStandIn {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Mailer for MailStandIn {
    async fn send(
        &self,
        message: &MailMessage,
        key: &IdempotencyKey,
    ) -> Result<Accepted, MailError> {
        let mut s = self.state();
        s.attempts += 1;
        s.keys.push(key.clone());
        if !s.available {
            return Err(MailError::new(
                MailErrorCode::Unavailable,
                MailOutcome::NotSent,
                "the mail stand-in is unavailable",
            ));
        }
        if let Some((code, outcome)) = s.refusal {
            return Err(MailError::new(
                code,
                outcome,
                "refused by the mail stand-in",
            ));
        }
        if self.idempotent {
            if let Some(id) = s.accepted.get(key) {
                return Ok(Accepted {
                    provider_id: Some(id.clone()),
                });
            }
        }
        let id = format!("standin-{}", s.sent.len() + 1);
        s.sent.push((message.clone(), key.clone()));
        s.accepted.insert(key.clone(), id.clone());
        Ok(Accepted {
            provider_id: Some(id),
        })
    }

    fn capabilities(&self) -> MailCapabilities {
        MailCapabilities {
            idempotent: self.idempotent,
        }
    }

    fn available(&self) -> bool {
        self.state().available
    }
}
