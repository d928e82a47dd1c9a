//! The e-mail channel's seams: resolving a recipient to an address at send time, and
//! composing the mail from a message.

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::ids::{Recipient, TenantId};
use crate::mail::{mail_from_payload, MailMessage};
use crate::model::Message;

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
