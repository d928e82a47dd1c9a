//! What every handler shares: the store, the token store, the clock, the optional vault and
//! transport, the failed-authentication limiter and the console's sessions.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use outboxkit_core::endpoint::{HttpsOnly, UrlPolicy};
use outboxkit_core::tokens::{DynTokenStore, TokenScope};
use outboxkit_core::{
    DynClock, DynEntropy, DynSecretVault, DynStore, DynWebhookTransport, Timestamp, TokenId,
};
use outboxkit_dispatch::{EndpointAdmin, Operator};

/// Settings of the API and the console, with documented defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Failed authentications allowed per client address within `failed_auth_window`
    /// before it gets 429 (default 10).
    pub failed_auth_limit: u32,
    /// The window of that count (default 60 s).
    pub failed_auth_window: Duration,
    /// The largest request body accepted, in bytes (default 64 KiB).
    pub body_limit: usize,
    /// How long a console session lasts (default 8 h).
    pub session_ttl: Duration,
    /// Mark the console's cookie `Secure` (default true; turn it off only for plain-http
    /// loopback use, as `outbox serve` does on a loopback address).
    pub secure_cookies: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            failed_auth_limit: 10,
            failed_auth_window: Duration::from_secs(60),
            body_limit: 64 * 1024,
            session_ttl: Duration::from_secs(8 * 3600),
            secure_cookies: true,
        }
    }
}

/// Everything the API and the console need, built once and shared.
#[derive(Clone, Debug)]
pub struct Serve {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub store: Arc<DynStore>,
    pub tokens: Arc<DynTokenStore>,
    pub clock: Arc<DynClock>,
    pub entropy: Arc<DynEntropy>,
    pub vault: Option<Arc<DynSecretVault>>,
    pub transport: Option<Arc<DynWebhookTransport>>,
    pub urls: Arc<dyn UrlPolicy>,
    pub config: ServeConfig,
    pub failures: Mutex<HashMap<Option<IpAddr>, (u32, Timestamp)>>,
    pub sessions: Mutex<HashMap<String, Session>>,
}

/// A console session: the token it was opened with and its CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub token: TokenId,
    pub scope: TokenScope,
    pub read_only: bool,
    pub csrf: String,
    pub expires: Timestamp,
}

/// The most client addresses whose failures are remembered (the map is cleared past it).
const MAX_TRACKED: usize = 10_000;

impl Serve {
    /// The API and console over `store`, authenticating with `tokens` (usually the same
    /// store), with time from `clock` and randomness from `entropy`. Without a vault, the
    /// calls that seal or open endpoint secrets (create, rotate, test) answer 503.
    pub fn new(
        store: Arc<DynStore>,
        tokens: Arc<DynTokenStore>,
        clock: Arc<DynClock>,
        entropy: Arc<DynEntropy>,
    ) -> Self {
        Serve {
            inner: Arc::new(Inner {
                store,
                tokens,
                clock,
                entropy,
                vault: None,
                transport: None,
                urls: Arc::new(HttpsOnly),
                config: ServeConfig::default(),
                failures: Mutex::default(),
                sessions: Mutex::default(),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => f(inner),
            None => {
                let i = &*self.inner;
                let mut copy = Inner {
                    store: i.store.clone(),
                    tokens: i.tokens.clone(),
                    clock: i.clock.clone(),
                    entropy: i.entropy.clone(),
                    vault: i.vault.clone(),
                    transport: i.transport.clone(),
                    urls: i.urls.clone(),
                    config: i.config.clone(),
                    failures: Mutex::default(),
                    sessions: Mutex::default(),
                };
                f(&mut copy);
                self.inner = Arc::new(copy);
            }
        }
        self
    }

    /// Seal and open endpoint secrets with `vault` (create, rotate-secret, test).
    pub fn with_vault(self, vault: Arc<DynSecretVault>) -> Self {
        self.edit(|i| i.vault = Some(vault))
    }

    /// Send test events with `transport` (`POST …/endpoints/{id}/test`).
    pub fn with_transport(self, transport: Arc<DynWebhookTransport>) -> Self {
        self.edit(|i| i.transport = Some(transport))
    }

    /// Check new and changed endpoint URLs with `policy` (default: https only).
    pub fn with_url_policy(self, policy: Arc<dyn UrlPolicy>) -> Self {
        self.edit(|i| i.urls = policy)
    }

    /// Use `config` instead of the defaults.
    pub fn with_config(self, config: ServeConfig) -> Self {
        self.edit(|i| i.config = config)
    }

    /// The axum router of the API (`/v1`) and the console (`/console`).
    pub fn router(&self) -> axum::Router {
        crate::routes::router(self.clone())
    }
}

impl Inner {
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub(crate) fn operator(&self) -> Operator {
        Operator::new(self.store.clone(), self.clock.clone())
    }

    pub(crate) fn admin(&self) -> Option<EndpointAdmin> {
        let vault = self.vault.clone()?;
        Some(
            EndpointAdmin::new(
                self.store.clone(),
                vault,
                self.clock.clone(),
                self.entropy.clone(),
            )
            .with_url_policy(self.urls.clone()),
        )
    }

    /// Seconds this address must still wait, when it is over the failure limit.
    pub(crate) fn blocked(&self, ip: Option<IpAddr>) -> Option<u64> {
        let now = self.now();
        let map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let (n, start) = map.get(&ip)?;
        let end = start.saturating_add(self.config.failed_auth_window);
        if *n >= self.config.failed_auth_limit && now < end {
            Some(end.duration_since(now).as_secs().max(1))
        } else {
            None
        }
    }

    /// Count one failed authentication of this address.
    pub(crate) fn failed(&self, ip: Option<IpAddr>) {
        let now = self.now();
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= MAX_TRACKED && !map.contains_key(&ip) {
            map.clear();
        }
        let e = map.entry(ip).or_insert((0, now));
        if now >= e.1.saturating_add(self.config.failed_auth_window) {
            *e = (0, now);
        }
        e.0 = e.0.saturating_add(1);
    }

    /// 32 random bytes as hex.
    pub(crate) fn random_hex(&self) -> String {
        let mut b = [0u8; 32];
        self.entropy.fill(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
