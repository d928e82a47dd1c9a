//! # outboxkit-core
//!
//! The pure heart of outbox, a library that makes "write it, then deliver it" reliable: an
//! application records an event in the same transaction as the change that caused it, and
//! outbox delivers it at least once to in-process handlers, signed webhooks and e-mail.
//!
//! This crate holds the domain types, the store / transport / mailer / clock / vault traits,
//! the pure classification of attempts into verdicts, retry policies, Standard Webhooks
//! signing, and the claim protocol's row arithmetic. It performs no I/O of its own: stores
//! live in `outboxkit-postgres`, `outboxkit-sqlite`, `outboxkit-redis` and (for tests)
//! `outboxkit-testing`; the HTTP transport in `outboxkit-http`.
//!
//! ```
//! use std::time::Duration;
//! use outboxkit_core::{classify, AttemptContext, Outcome, RetryPolicy, Timestamp, Verdict, VerdictPolicy};
//!
//! let policy = VerdictPolicy::new(RetryPolicy::webhook_default());
//! let now = Timestamp::from_unix_millis(1_700_000_000_000)?;
//! let ctx = AttemptContext { attempt: 1, snoozes: 0, probe: false, now, jitter: 0.5 };
//! let verdict = classify(&Outcome::Http { status: 503, retry_after: None }, &ctx, &policy);
//! assert_eq!(verdict, Verdict::Retry { at: now.saturating_add(Duration::from_secs(60)) });
//! # Ok::<(), outboxkit_core::Error>(())
//! ```
#![deny(missing_docs)]

pub mod claim;
pub mod endpoint;
pub mod error;
pub mod fanout;
pub mod ids;
pub mod mail;
pub mod model;
pub mod retention;
pub mod retry;
pub mod signing;
pub mod store;
pub mod system;
pub mod time;
pub mod tokens;
pub mod transport;
pub mod vault;
pub mod verdict;
pub mod verifier;
pub mod wake;

/// The attribute every trait of this crate is declared with; put it on your impls of
/// [`Handler`], [`DeliveryStore`], [`Mailer`], … (re-exported so you need no direct
/// dependency on `async-trait`).
pub use async_trait::async_trait;

pub use claim::{
    ClaimRequest, ClaimSource, Claimed, Completion, DeliveryUpdate, Lease, ReleaseReport, MAX_BATCH,
};
pub use endpoint::{
    AnyUrl, BodyFormat, Consumer, DisabledReason, Endpoint, EndpointStatus, EndpointUpdate,
    EndpointUrl, HttpsOnly, LastDelivery, SealedSecret, UrlPolicy,
};
pub use error::{Error, ErrorKind, Result};
pub use ids::{
    ClaimToken, ConsumerName, DeliveryId, EndpointId, IdempotencyKey, MessageId, OrderingKey,
    Recipient, TenantId, TokenId, Topic, TopicFilter, TopicPattern,
};
pub use mail::{
    may_retry, Accepted, DynMailer, MailCapabilities, MailError, MailErrorCode, MailMessage,
    MailOutcome, Mailer,
};
pub use model::is_json_text;
pub use model::{
    Attempt, AttemptOutcome, AttemptRecord, Cause, DeadReason, Delivery, DeliveryStatus,
    Destination, DestinationKind, Envelope, ErrorClass, LastOutcome, Limits, Message, NewMessage,
    PayloadFingerprint, ValidMessage,
};
pub use retention::{RetentionCutoffs, RetentionPolicy};
pub use retry::{Jitter, PolicyOverride, RetryPolicy, TenantOverrides, TenantPolicy};
pub use signing::{sign, verify, HeaderNames, VerifyError, WebhookSecret};
pub use store::{
    Cursor, DeliveryFilter, DeliveryStore, DynDeliveryStore, DynEndpointStore, DynLedger,
    DynMessageStore, DynStore, EndpointStore, Enqueued, Ledger, MessageStore, Page, PageRequest,
    PurgeReport, Stats, Store, TenantStats,
};
pub use system::{OsEntropy, Stopwatch, SystemClock};
pub use time::{Clock, DynClock, DynEntropy, Entropy, EntropyExt, Timestamp};
pub use tokens::{ApiToken, DynTokenStore, PresentedToken, TokenHash, TokenScope, TokenStore};
pub use transport::{DynWebhookTransport, SignedRequest, WebhookResponse, WebhookTransport};
pub use vault::{AeadVault, DynSecretVault, PlaintextVault, SecretContext, SecretVault};
pub use verdict::{
    classify, parse_retry_after, AttemptContext, HandlerOutcome, Outcome, Verdict, VerdictPolicy,
};
pub use verifier::{HeaderLookup, Verifier};
pub use wake::{WakeListener, Wakeups};
