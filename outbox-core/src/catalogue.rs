//! The event-type catalogue: topics registered with a description and an optional JSON
//! Schema, and the mode that decides what an enqueue of a topic outside it meets.
//!
//! The rules are pure: [`NewEventType::validate`] (the schema must compile),
//! [`Catalogue::check`] (what one message meets under the mode) and
//! [`Catalogue::check_filter`] (an endpoint's filter against the registered topics). Stores
//! keep the types and the mode ([`crate::EventTypeStore`]) and a [`CatalogueCache`] of
//! what they last read, so an enqueue does not read the catalogue every time.
//!
//! ```
//! use outboxkit_core::catalogue::{Catalogue, CatalogueMode, EventType};
//! use outboxkit_core::{Timestamp, Topic};
//!
//! let now = Timestamp::from_unix_millis(0).unwrap();
//! let order = EventType {
//!     topic: Topic::new("order.created").unwrap(),
//!     description: "an order was placed".into(),
//!     schema: Some(serde_json::json!({"type": "object", "required": ["id"]})),
//!     created_at: now,
//!     updated_at: now,
//! };
//! let c = Catalogue::new(CatalogueMode::Validate, vec![order]).unwrap();
//! let topic = Topic::new("order.created").unwrap();
//! assert!(c.check(&topic, br#"{"id": 1}"#).is_ok());
//! let e = c.check(&topic, br#"{"total": 1}"#).unwrap_err();
//! assert!(e.message().contains("required"), "{e}");
//! assert!(c.check(&Topic::new("order.paid").unwrap(), b"{}").is_err());
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::ids::{Topic, TopicFilter, TopicPattern};
use crate::model::ValidMessage;
use crate::time::Timestamp;

/// The longest description accepted, in bytes.
pub const MAX_DESCRIPTION: usize = 1000;
/// The largest schema accepted, as JSON text, in bytes.
pub const MAX_SCHEMA: usize = 64 * 1024;
/// How long a store uses the catalogue it read before reading it again (by the store's
/// clock). A refusal is always checked against a fresh read, so only a change that refuses
/// more (a mode turned on, a type deleted, a narrower schema) can take this long to apply
/// in another process.
pub const CACHE_MAX_AGE: Duration = Duration::from_secs(1);

/// What an enqueue meets when the catalogue does not know its topic, or its payload does
/// not fit the topic's schema.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CatalogueMode {
    /// Nothing is checked (the default; the catalogue is documentation).
    #[default]
    Off,
    /// A topic that is not registered is refused.
    RefuseUnknown,
    /// A topic that is not registered is refused, and a payload that fails its type's
    /// schema too.
    Validate,
}

impl CatalogueMode {
    /// Every mode.
    pub const ALL: [CatalogueMode; 3] = [
        CatalogueMode::Off,
        CatalogueMode::RefuseUnknown,
        CatalogueMode::Validate,
    ];

    /// `off`, `refuse-unknown` or `validate`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatalogueMode::Off => "off",
            CatalogueMode::RefuseUnknown => "refuse-unknown",
            CatalogueMode::Validate => "validate",
        }
    }
}

impl fmt::Display for CatalogueMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CatalogueMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        CatalogueMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| Error::invalid_input("mode", "must be off, refuse-unknown or validate"))
    }
}

/// A registered event type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventType {
    /// The topic it describes.
    pub topic: Topic,
    /// What it means (0–1000 bytes).
    pub description: String,
    /// The JSON Schema its payloads must meet in [`CatalogueMode::Validate`].
    pub schema: Option<serde_json::Value>,
    /// When it was first registered.
    pub created_at: Timestamp,
    /// When it was last changed.
    pub updated_at: Timestamp,
}

/// An event type to register or replace ([`crate::EventTypeStore::put_event_type`]).
#[derive(Clone, Debug, PartialEq)]
pub struct NewEventType {
    /// The topic.
    pub topic: Topic,
    /// What it means (0–1000 bytes).
    pub description: String,
    /// Its JSON Schema, if payloads are to be checked.
    pub schema: Option<serde_json::Value>,
}

impl NewEventType {
    /// A type without a schema.
    pub fn new(topic: Topic, description: impl Into<String>) -> Self {
        NewEventType {
            topic,
            description: description.into(),
            schema: None,
        }
    }

    /// With a JSON Schema.
    pub fn schema(mut self, schema: serde_json::Value) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Check the description and compile the schema; every store calls this before it
    /// writes anything.
    pub fn validate(&self) -> Result<()> {
        if self.description.len() > MAX_DESCRIPTION {
            return Err(Error::invalid_input(
                "description",
                "must be at most 1000 bytes",
            ));
        }
        if self.description.chars().any(char::is_control) {
            return Err(Error::invalid_input(
                "description",
                "must not contain control characters",
            ));
        }
        if let Some(s) = &self.schema {
            if serde_json::to_vec(s).map_or(usize::MAX, |t| t.len()) > MAX_SCHEMA {
                return Err(Error::invalid_input("schema", "must be at most 64 KiB"));
            }
            compile(s).map_err(|e| Error::invalid_input("schema", e))?;
        }
        Ok(())
    }

    /// The type as stored: `created_at` kept from `existing` when it is a replacement.
    pub fn into_event_type(self, existing: Option<&EventType>, now: Timestamp) -> EventType {
        EventType {
            topic: self.topic,
            description: self.description,
            schema: self.schema,
            created_at: existing.map_or(now, |e| e.created_at),
            updated_at: now,
        }
    }
}

/// Compile `schema`: a JSON object or boolean, within the drafts the crate knows, with no
/// `$ref` outside itself (nothing is fetched). The message names where it fails, never the
/// schema's values.
fn compile(schema: &serde_json::Value) -> std::result::Result<jsonschema::Validator, String> {
    if !(schema.is_object() || schema.is_boolean()) {
        return Err("must be a JSON object (or true/false)".into());
    }
    jsonschema::validator_for(schema).map_err(|e| {
        let at = e.instance_path().as_str();
        let at = if at.is_empty() { "/" } else { at };
        format!(
            "is not a valid JSON Schema: its `{}` at {at} does not compile",
            e.kind().keyword()
        )
    })
}

/// The catalogue as read at one moment: the mode and every type, schemas compiled.
pub struct Catalogue {
    mode: CatalogueMode,
    types: BTreeMap<Topic, Option<jsonschema::Validator>>,
}

impl fmt::Debug for Catalogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalogue")
            .field("mode", &self.mode)
            .field("types", &self.types.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Catalogue {
    /// The empty catalogue in mode `off`.
    pub fn off() -> Self {
        Catalogue {
            mode: CatalogueMode::Off,
            types: BTreeMap::new(),
        }
    }

    /// A catalogue of `types` in `mode`. Only [`CatalogueMode::Validate`] compiles schemas;
    /// a stored schema that no longer compiles is `Misconfigured`.
    pub fn new(mode: CatalogueMode, types: impl IntoIterator<Item = EventType>) -> Result<Self> {
        let mut out = BTreeMap::new();
        for t in types {
            let compiled = match (&t.schema, mode) {
                (Some(s), CatalogueMode::Validate) => {
                    Some(compile(s).map_err(|e| Error::misconfigured("schema", e))?)
                }
                _ => None,
            };
            out.insert(t.topic, compiled);
        }
        Ok(Catalogue { mode, types: out })
    }

    /// The mode.
    pub fn mode(&self) -> CatalogueMode {
        self.mode
    }

    /// Whether `topic` is registered.
    pub fn knows(&self, topic: &Topic) -> bool {
        self.types.contains_key(topic)
    }

    /// What an enqueue of `payload` under `topic` meets: `Ok` in mode `off`; an unknown
    /// topic is `InvalidInput` (`topic`) in the other modes; in `validate` a payload that
    /// is not JSON, or fails the schema, is `InvalidInput` (`payload`) naming the failing
    /// instance path and the schema's rule, never a value.
    pub fn check(&self, topic: &Topic, payload: &[u8]) -> Result<()> {
        if self.mode == CatalogueMode::Off {
            return Ok(());
        }
        let Some(schema) = self.types.get(topic) else {
            return Err(Error::invalid_input(
                "topic",
                format!(
                    "`{topic}` is not in the event-type catalogue (mode {})",
                    self.mode
                ),
            ));
        };
        let Some(schema) = schema else {
            return Ok(());
        };
        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|_| {
            Error::invalid_input(
                "payload",
                format!("is not JSON, and `{topic}` has a JSON Schema (mode validate)"),
            )
        })?;
        let failure = schema.iter_errors(&value).next().map(|e| {
            let at = e.instance_path().as_str();
            let at = if at.is_empty() { "/" } else { at };
            format!(
                "at {at} fails the `{}` rule of the schema of `{topic}` (schema path {})",
                e.kind().keyword(),
                e.schema_path().as_str()
            )
        });
        match failure {
            None => Ok(()),
            Some(m) => Err(Error::invalid_input("payload", m)),
        }
    }

    /// [`Catalogue::check`] for every message, in order (the first refusal is the error).
    pub fn check_all<'a>(
        &self,
        messages: impl IntoIterator<Item = &'a ValidMessage>,
    ) -> Result<()> {
        if self.mode == CatalogueMode::Off {
            return Ok(());
        }
        messages
            .into_iter()
            .try_for_each(|m| self.check(&m.topic, &m.payload))
    }

    /// An endpoint's filter against the catalogue (when the mode is not `off`): every exact
    /// topic must be registered and every `prefix.*` must match a registered topic; `*` is
    /// always accepted. The error names the first pattern that does not.
    pub fn check_filter(&self, filter: &TopicFilter) -> Result<()> {
        if self.mode == CatalogueMode::Off {
            return Ok(());
        }
        for p in filter.patterns() {
            let ok = match p {
                TopicPattern::All => true,
                TopicPattern::Exact(t) => self.knows(t),
                _ => self.types.keys().any(|t| p.matches(t)),
            };
            if !ok {
                return Err(Error::invalid_input(
                    "filter",
                    format!(
                        "`{p}` matches no event type in the catalogue (mode {})",
                        self.mode
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// What one store handle last read of the catalogue, and when (by the store's clock).
///
/// A store checks an enqueue against [`CatalogueCache::fresh`] when it has one; when the
/// copy is older than [`CACHE_MAX_AGE`], or when the copy would refuse, the store reads the
/// catalogue again ([`CatalogueCache::keep`]) and checks against that. Own writes call
/// [`CatalogueCache::forget`].
#[derive(Debug, Default)]
pub struct CatalogueCache {
    copy: Mutex<Option<(Arc<Catalogue>, Timestamp)>>,
}

impl CatalogueCache {
    /// The copy, if it was read within [`CACHE_MAX_AGE`] before `now`.
    pub fn fresh(&self, now: Timestamp) -> Option<Arc<Catalogue>> {
        let copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        copy.as_ref()
            .filter(|(_, at)| *at <= now && now.duration_since(*at) < CACHE_MAX_AGE)
            .map(|(c, _)| c.clone())
    }

    /// The copy, whatever its age (for a path that cannot read, e.g. Redis `enqueue_in`).
    pub fn last(&self) -> Option<Arc<Catalogue>> {
        let copy = self.copy.lock().unwrap_or_else(PoisonError::into_inner);
        copy.as_ref().map(|(c, _)| c.clone())
    }

    /// Keep `catalogue`, read at `now`.
    pub fn keep(&self, catalogue: Catalogue, now: Timestamp) -> Arc<Catalogue> {
        let c = Arc::new(catalogue);
        *self.copy.lock().unwrap_or_else(PoisonError::into_inner) = Some((c.clone(), now));
        c
    }

    /// Drop the copy (after an own write), so the next check reads again.
    pub fn forget(&self) {
        *self.copy.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Whether the fresh copy accepts `messages`: `true` means no read is needed; `false`
    /// means read the catalogue, [`keep`](Self::keep) it and check against that.
    pub fn accepts<'a>(
        &self,
        now: Timestamp,
        messages: impl IntoIterator<Item = &'a ValidMessage>,
    ) -> bool {
        self.fresh(now)
            .is_some_and(|c| c.check_all(messages).is_ok())
    }
}

/// Parse a stored schema text (`Unexpected` when a store holds something that is not JSON).
pub fn parse_stored_schema(text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            "a stored event-type schema is not JSON",
        )
        .with_source(e)
    })
}

#[cfg(test)]
#[path = "catalogue_tests.rs"]
mod tests;
