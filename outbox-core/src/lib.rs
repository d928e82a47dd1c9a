#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod audit;
pub mod broker;
pub mod catalogue;
pub mod claim;
pub mod claim_rules;
pub mod console_memory;
pub mod console_store;
pub mod endpoint;
pub mod endpoint_headers;
pub mod error;
pub mod fanout;
pub mod ids;
pub mod mail;
pub mod model;
pub mod permits;
pub mod retention;
pub mod retry;
pub mod sealed;
pub mod signing;
pub mod store;
pub mod system;
pub mod time;
pub mod tokens;
pub mod trace;
pub mod transport;
pub mod vault;
pub mod verdict;
pub mod verifier;
pub mod wake;

/// The attribute every trait of this crate is declared with; put it on your impls of
/// [`Handler`], [`DeliveryStore`], [`Mailer`], … (re-exported so you need no direct
/// dependency on `async-trait`).
pub use async_trait::async_trait;

pub use audit::{AuditCursor, AuditEntry, AuditPage, AUDIT_RETENTION_DEFAULT};
pub use broker::{
    broker_headers, BrokerFailure, BrokerMessage, BrokerResponse, BrokerTransport,
    DynBrokerTransport, SubjectTemplate,
};
pub use catalogue::{CatalogueMode, EventType, NewEventType};
pub use claim::{
    ClaimRequest, ClaimSource, Claimed, Completion, DeliveryUpdate, Lease, ReleaseReport, MAX_BATCH,
};
pub use console_store::{
    ActivityBucket, ActivityQuery, ConsoleSession, ConsoleStore, DynConsoleStore,
    MAX_SESSIONS_PER_TOKEN,
};
pub use endpoint::{
    AnyUrl, BodyFormat, Consumer, ConsumerStatus, DisabledReason, Endpoint, EndpointStatus,
    EndpointUpdate, EndpointUrl, HttpsOnly, LastDelivery, SealedSecret, UrlPolicy,
};
pub use endpoint_headers::{CustomHeader, HeaderInput, HeaderValue};
pub use error::{Error, ErrorKind, Result};
pub use ids::{
    AuditId, ClaimToken, ConsumerName, DeliveryId, EndpointId, IdempotencyKey, MessageId,
    OrderingKey, Recipient, TenantId, TokenId, Topic, TopicFilter, TopicPattern,
};
pub use mail::{
    may_retry, Accepted, DynMailer, MailCapabilities, MailError, MailErrorCode, MailMessage,
    MailOutcome, MailSent, Mailer,
};
pub use model::is_json_text;
pub use model::{parse_delay, SendAt, SEND_AT_SKEW};
pub use model::{
    Attempt, AttemptDetail, AttemptOutcome, AttemptRecord, AttemptTiming, Cause, DeadReason,
    Delivery, DeliveryStatus, Destination, DestinationKind, Envelope, ErrorClass, LastOutcome,
    Limits, Message, NewMessage, PayloadFingerprint, ValidMessage,
};
pub use permits::{PermitLog, Permits, PERMIT_WINDOW};
pub use retention::{RetentionCutoffs, RetentionPolicy};
pub use retry::{Jitter, PolicyOverride, RetryPolicy, TenantOverrides, TenantPolicy};
pub use signing::{
    sign, sign_keyed, sign_with, verify, HeaderNames, SigningKey, VerifyError, WebhookSecret,
};
pub use store::{
    CancelReport, Cursor, DeliveryFilter, DeliveryStore, DeliveryStoreExt, DynDeliveryStore,
    DynEndpointStore, DynEventTypeStore, DynLedger, DynMessageStore, DynOperatorStore, DynStore,
    EndpointStore, Enqueued, EventTypeStore, Ledger, LedgerExt, MessageStore, OperatorStore, Page,
    PageRequest, PurgeReport, Stats, Store, TenantStats,
};
pub use system::{OsEntropy, Stopwatch, SystemClock};
pub use time::{Clock, DynClock, DynEntropy, Entropy, EntropyExt, Timestamp};
pub use tokens::{
    ApiToken, DynTokenStore, PresentedToken, TokenAccess, TokenHash, TokenScope, TokenStore,
};
pub use trace::{current_traceparent, set_trace_source, TraceSource, Traceparent, TRACEPARENT};
pub use transport::{DynWebhookTransport, Sent, SignedRequest, WebhookResponse, WebhookTransport};
pub use vault::{AeadVault, DynSecretVault, PlaintextVault, SecretContext, SecretVault};
pub use verdict::{
    classify, parse_retry_after, AttemptContext, HandlerOutcome, Outcome, Verdict, VerdictPolicy,
};
pub use verifier::{HeaderLookup, Verifier};
pub use wake::{WakeListener, Wakeups};

// The operator services and the webhook request: they only call the traits, so every
// front end (the dispatcher, the admin API, the `outbox` command) shares them.
pub mod ops;
pub mod webhook_request;
pub use ops::{EndpointAdmin, NewEndpoint, Operator};
pub use webhook_request::{
    open_headers, open_secrets, signed_request, signed_request_keyed, webhook_body,
    with_custom_headers,
};
