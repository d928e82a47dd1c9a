//! [`TokenStore`] for the in-memory store: a map by id beside the delivery state.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use async_trait::async_trait;
use outboxkit_core::tokens::{ApiToken, TokenStore};
use outboxkit_core::{Error, ErrorKind, Result, Timestamp, TokenId};

use super::InMemoryStore;

/// The stored tokens.
#[derive(Debug, Default)]
pub(super) struct Tokens(BTreeMap<TokenId, ApiToken>);

impl InMemoryStore {
    fn tokens(&self) -> std::sync::MutexGuard<'_, Tokens> {
        self.shared
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl TokenStore for InMemoryStore {
    async fn create_token(&self, token: &ApiToken) -> Result<()> {
        token.validate()?;
        let mut t = self.tokens();
        if t.0.contains_key(&token.id) {
            return Err(Error::new(ErrorKind::Conflict, "the token exists"));
        }
        t.0.insert(token.id, token.clone());
        Ok(())
    }

    async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
        self.tokens()
            .0
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::not_found("token"))
    }

    async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
        let mut all: Vec<ApiToken> = self.tokens().0.values().cloned().collect();
        all.sort_by_key(|t| (t.created_at, t.id));
        Ok(all)
    }

    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
        let mut t = self.tokens();
        let token = t.0.get_mut(&id).ok_or_else(|| Error::not_found("token"))?;
        token.revoked_at.get_or_insert(at);
        Ok(token.clone())
    }
}
