//! `EventTypeStore` for [`InMemoryStore`]: the catalogue beside the delivery state, with its
//! compiled form rebuilt at every change, so every enqueue checks the catalogue as it is.

use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard};

use async_trait::async_trait;
use outboxkit_core::catalogue::Catalogue;
use outboxkit_core::{
    CatalogueMode, Error, EventType, EventTypeStore, NewEventType, Result, Topic, ValidMessage,
};

use super::InMemoryStore;

/// The catalogue of one in-memory store.
#[derive(Debug)]
pub(super) struct Types {
    mode: CatalogueMode,
    types: BTreeMap<Topic, EventType>,
    compiled: Arc<Catalogue>,
}

impl Default for Types {
    fn default() -> Self {
        Types {
            mode: CatalogueMode::Off,
            types: BTreeMap::new(),
            compiled: Arc::new(Catalogue::off()),
        }
    }
}

impl Types {
    fn rebuild(&mut self) -> Result<()> {
        self.compiled = Arc::new(Catalogue::new(self.mode, self.types.values().cloned())?);
        Ok(())
    }
}

impl InMemoryStore {
    fn types(&self) -> MutexGuard<'_, Types> {
        self.shared.types.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Check validated messages against the catalogue (before anything is written).
    pub(super) fn check_catalogue(&self, valid: &[ValidMessage]) -> Result<()> {
        let compiled = self.types().compiled.clone();
        compiled.check_all(valid)
    }
}

#[async_trait]
impl EventTypeStore for InMemoryStore {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        event_type.validate()?;
        let now = self.now();
        let mut t = self.types();
        let stored = event_type
            .clone()
            .into_event_type(t.types.get(&event_type.topic), now);
        let before = t.types.insert(stored.topic.clone(), stored.clone());
        if let Err(e) = t.rebuild() {
            match before {
                Some(b) => t.types.insert(b.topic.clone(), b),
                None => t.types.remove(&stored.topic),
            };
            return Err(e);
        }
        Ok(stored)
    }

    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        self.types()
            .types
            .get(topic)
            .cloned()
            .ok_or_else(|| Error::not_found("event type"))
    }

    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        Ok(self.types().types.values().cloned().collect())
    }

    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        let mut t = self.types();
        t.types
            .remove(topic)
            .ok_or_else(|| Error::not_found("event type"))?;
        t.rebuild()
    }

    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        Ok(self.types().mode)
    }

    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        let mut t = self.types();
        let before = t.mode;
        t.mode = mode;
        if let Err(e) = t.rebuild() {
            t.mode = before;
            return Err(e);
        }
        Ok(())
    }
}
