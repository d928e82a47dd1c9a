//! `MessageStore` for [`InMemoryStore`] (the fan-out itself is `State::enqueue`).

use async_trait::async_trait;
use outboxkit_core::{Enqueued, MessageStore, NewMessage, Result};

use super::InMemoryStore;

#[async_trait]
impl MessageStore for InMemoryStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        let now = self.now();
        let valid = message.validate(&self.limits, now)?;
        self.check_catalogue(std::slice::from_ref(&valid))?;
        let out = self.lock().enqueue(valid, now, &*self.entropy);
        self.wake();
        Ok(out)
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        let now = self.now();
        let valid = messages
            .into_iter()
            .map(|m| m.validate(&self.limits, now))
            .collect::<Result<Vec<_>>>()?;
        self.check_catalogue(&valid)?;
        if valid.is_empty() {
            return Ok(Vec::new());
        }
        let out = {
            let mut state = self.lock();
            valid
                .into_iter()
                .map(|v| state.enqueue(v, now, &*self.entropy))
                .collect()
        };
        self.wake();
        Ok(out)
    }
}
