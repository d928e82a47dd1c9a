//! Validated identifiers and names. A bad value is an [`ErrorKind::InvalidInput`] error
//! naming the field, never a panic.
//!
//! [`ErrorKind::InvalidInput`]: crate::ErrorKind::InvalidInput

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::time::{Entropy, Timestamp};

fn v7(now: Timestamp, entropy: &dyn Entropy) -> Uuid {
    let mut rand = [0u8; 10];
    entropy.fill(&mut rand);
    uuid::Builder::from_unix_timestamp_millis(now.as_unix_millis() as u64, &rand).into_uuid()
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Uuid);

        impl $name {
            /// A new time-ordered id (UUIDv7) from the given time and entropy.
            pub fn generate(now: Timestamp, entropy: &dyn Entropy) -> Self {
                $name(v7(now, entropy))
            }

            /// Accept an existing UUID; only version 7 is valid.
            pub fn from_uuid(uuid: Uuid) -> Result<Self> {
                if uuid.get_version_num() == 7 {
                    Ok($name(uuid))
                } else {
                    Err(Error::invalid_input($field, "must be a UUIDv7"))
                }
            }

            /// Parse the hyphenated or simple text form of a UUIDv7.
            pub fn parse(s: &str) -> Result<Self> {
                let uuid = Uuid::try_parse(s.trim())
                    .map_err(|_| Error::invalid_input($field, "must be a UUID"))?;
                Self::from_uuid(uuid)
            }

            /// The underlying UUID.
            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0.hyphenated())
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                self.0.serialize(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let uuid = Uuid::deserialize(d)?;
                Self::from_uuid(uuid).map_err(serde::de::Error::custom)
            }
        }
    };
}

uuid_id!(
    /// The id of a message (one event): a UUIDv7, so ids sort by creation time.
    MessageId, "message_id"
);
uuid_id!(
    /// The id of a delivery (one message to one destination). It is the `webhook-id` of a
    /// webhook delivery and the root of the e-mail idempotency key: stable across retries.
    DeliveryId, "delivery_id"
);
uuid_id!(
    /// The id of a webhook endpoint.
    EndpointId, "endpoint_id"
);
uuid_id!(
    /// The id of an admin API token (`outboxkit_core::tokens`).
    TokenId, "token_id"
);
uuid_id!(
    /// The id of an audit log entry (`outboxkit_core::audit`): time-ordered.
    AuditId, "audit_id"
);

/// The random token that fences every call made under one claim.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClaimToken(Uuid);

impl ClaimToken {
    /// A fresh random token (122 random bits).
    pub fn generate(entropy: &dyn Entropy) -> Self {
        let mut b = [0u8; 16];
        entropy.fill(&mut b);
        ClaimToken(uuid::Builder::from_random_bytes(b).into_uuid())
    }

    /// Rebuild a token read back from a store.
    pub fn from_uuid(uuid: Uuid) -> Self {
        ClaimToken(uuid)
    }

    /// Parse the text form.
    pub fn parse(s: &str) -> Result<Self> {
        Uuid::try_parse(s)
            .map(ClaimToken)
            .map_err(|_| Error::invalid_input("claim_token", "must be a UUID"))
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for ClaimToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClaimToken({})", self.0.hyphenated())
    }
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $field:literal, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Validate and wrap.
            pub fn new(value: impl Into<String>) -> Result<Self> {
                let value = value.into();
                $check(&value).map_err(|why| Error::invalid_input($field, why))?;
                Ok($name(value))
            }

            /// Wrap a value the library built itself and knows to be valid.
            #[allow(dead_code)]
            pub(crate) fn trusted(value: String) -> Self {
                debug_assert!($check(&value).is_ok());
                $name(value)
            }

            /// The text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = Error;
            fn try_from(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = Error;
            fn try_from(s: String) -> Result<Self> {
                Self::new(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

fn check_topic(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("must not be empty");
    }
    if s.len() > 128 {
        return Err("must be at most 128 characters");
    }
    for segment in s.split('.') {
        let mut chars = segment.chars();
        match chars.next() {
            None => return Err("must be dot-separated names without empty parts"),
            Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
                return Err("each part must start with a lowercase letter or digit")
            }
            Some(_) => {}
        }
        if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-') {
            return Err("may hold only lowercase letters, digits, '_', '-' and '.'");
        }
    }
    Ok(())
}

fn check_tenant(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("must not be empty");
    }
    if s.len() > 64 {
        return Err("must be at most 64 characters");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-.:@".contains(c))
    {
        return Err("may hold only ASCII letters, digits and '_', '-', '.', ':', '@'");
    }
    Ok(())
}

fn check_consumer(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("must not be empty");
    }
    if s.len() > 64 {
        return Err("must be at most 64 characters");
    }
    if !s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Err("must start with a lowercase letter or digit");
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c))
    {
        return Err("may hold only lowercase letters, digits and '_', '-', '.'");
    }
    Ok(())
}

fn check_key(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("must not be empty");
    }
    if s.len() > 200 {
        return Err("must be at most 200 characters");
    }
    if !s.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err("may hold only visible ASCII characters (no spaces)");
    }
    Ok(())
}

fn check_recipient(s: &str) -> std::result::Result<(), &'static str> {
    if s.trim().is_empty() {
        return Err("must not be empty");
    }
    if s.len() > 320 {
        return Err("must be at most 320 characters");
    }
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters");
    }
    Ok(())
}

string_id!(
    /// An event type: lowercase dotted names (`order.created`), 1–128 characters; each part
    /// starts with a letter or digit and holds letters, digits, `_` and `-`.
    Topic, "topic", check_topic
);
string_id!(
    /// A tenant (account, workspace): 1–64 ASCII letters, digits and `_-.:@`. Every read and
    /// write of the ledger and the endpoints is scoped by it. Messages without an explicit
    /// tenant belong to [`TenantId::default`] (`"default"`).
    TenantId, "tenant", check_tenant
);
string_id!(
    /// The name of an in-process consumer (a handler registration): 1–64 lowercase letters,
    /// digits and `_-.`.
    ConsumerName, "consumer", check_consumer
);
string_id!(
    /// An idempotency key: 1–200 visible ASCII characters. Unique per
    /// `(tenant, topic, key)`: a second enqueue with the same triple writes nothing.
    IdempotencyKey, "idempotency_key", check_key
);
string_id!(
    /// An ordering key (the aggregate, e.g. `order:42`): 1–200 visible ASCII characters.
    /// Deliveries with the same key to the same destination are delivered in order.
    OrderingKey, "ordering_key", check_key
);
string_id!(
    /// An e-mail recipient: an address, or an opaque reference that the dispatcher's
    /// resolver turns into an address at send time (so the queue need not hold personal
    /// data). 1–320 characters without control characters.
    Recipient, "recipient", check_recipient
);

impl TenantId {
    /// The tenant name used when a caller names none.
    pub const DEFAULT_NAME: &'static str = "default";
}

impl Default for TenantId {
    fn default() -> Self {
        TenantId(Self::DEFAULT_NAME.to_owned())
    }
}

/// One pattern of a topic filter: `*` (everything), an exact topic, or `prefix.*` (every
/// topic that starts with `prefix.`, at any depth; not `prefix` itself).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum TopicPattern {
    /// `*`
    All,
    /// `order.created`
    Exact(Topic),
    /// `order.*`: the stored prefix is `order`.
    Prefix(Topic),
}

impl TopicPattern {
    /// Parse `*`, `a.b` or `a.*`.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "*" {
            return Ok(TopicPattern::All);
        }
        if let Some(prefix) = s.strip_suffix(".*") {
            let prefix = Topic::new(prefix).map_err(|_| {
                Error::invalid_input(
                    "filter",
                    "a wildcard must be `*` or `prefix.*` with a valid topic prefix",
                )
            })?;
            return Ok(TopicPattern::Prefix(prefix));
        }
        Topic::new(s)
            .map(TopicPattern::Exact)
            .map_err(|e| Error::invalid_input("filter", e.message().to_owned()))
    }

    /// Whether `topic` matches.
    pub fn matches(&self, topic: &Topic) -> bool {
        match self {
            TopicPattern::All => true,
            TopicPattern::Exact(t) => t == topic,
            TopicPattern::Prefix(p) => {
                let t = topic.as_str();
                t.len() > p.as_str().len() + 1
                    && t.starts_with(p.as_str())
                    && t.as_bytes()[p.as_str().len()] == b'.'
            }
        }
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicPattern::All => f.write_str("*"),
            TopicPattern::Exact(t) => f.write_str(t.as_str()),
            TopicPattern::Prefix(p) => write!(f, "{p}.*"),
        }
    }
}

/// A topic filter: one or more [`TopicPattern`]s; matches when any matches.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TopicFilter(Vec<TopicPattern>);

impl TopicFilter {
    /// The filter that matches every topic.
    pub fn all() -> Self {
        TopicFilter(vec![TopicPattern::All])
    }

    /// A filter from patterns; at least one, at most 100.
    pub fn new(patterns: Vec<TopicPattern>) -> Result<Self> {
        if patterns.is_empty() {
            return Err(Error::invalid_input(
                "filter",
                "must name at least one topic or `*`",
            ));
        }
        if patterns.len() > 100 {
            return Err(Error::invalid_input(
                "filter",
                "must name at most 100 patterns",
            ));
        }
        Ok(TopicFilter(patterns))
    }

    /// Parse a comma-separated list: `*`, or `order.created, invoice.*`.
    pub fn parse(s: &str) -> Result<Self> {
        let patterns = s
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(TopicPattern::parse)
            .collect::<Result<Vec<_>>>()?;
        Self::new(patterns)
    }

    /// Whether any pattern matches `topic`.
    pub fn matches(&self, topic: &Topic) -> bool {
        self.0.iter().any(|p| p.matches(topic))
    }

    /// The patterns.
    pub fn patterns(&self) -> &[TopicPattern] {
        &self.0
    }
}

impl fmt::Display for TopicFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl Serialize for TopicFilter {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TopicFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[path = "ids_tests.rs"]
mod tests;
