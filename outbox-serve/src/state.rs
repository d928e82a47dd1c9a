//! What every handler shares: the store, the token store, the clock, the optional vault and
//! transport, the failed-authentication limiter and the console's sessions.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use outboxkit_core::endpoint::{HttpsOnly, UrlPolicy};
use outboxkit_core::ops::{EndpointAdmin, Operator};
use outboxkit_core::tokens::{DynTokenStore, TokenScope};
use outboxkit_core::{
    AuditEntry, ConsoleSession, DynClock, DynConsoleStore, DynEntropy, DynSecretVault, DynStore,
    DynWebhookTransport, TenantId, Timestamp, TokenId,
};

use crate::local_console::LocalConsole;

/// Settings of the API and the console, with documented defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Failed authentications allowed per client address within `failed_auth_window`;
    /// past it, that address's failed attempts get 429 (a valid token is still accepted).
    /// Default 10.
    pub failed_auth_limit: u32,
    /// Failed authentications allowed from all addresses together within the window; past
    /// it, every failed attempt gets 429 (valid tokens are still accepted). Default 1,000.
    pub failed_auth_global_limit: u32,
    /// The window of those counts (default 60 s).
    pub failed_auth_window: Duration,
    /// The most client addresses whose failures are remembered; past it the oldest is
    /// forgotten (the global count is kept). Default 10,000.
    pub failed_auth_tracked: usize,
    /// The largest request body accepted, in bytes (default 64 KiB). A larger
    /// `Content-Length` gets 413 before the body is read.
    pub body_limit: usize,
    /// The largest body of an enqueue (`POST …/messages`), in bytes: the store's payload
    /// limit and room for the rest (default 320 KiB, the default 256 KiB payload limit plus
    /// 64 KiB). The store still refuses a payload over its own limit (400).
    pub enqueue_body_limit: usize,
    /// How long a console session lasts (default 8 h).
    pub session_ttl: Duration,
    /// Unused since sessions moved to the console store, which keeps at most
    /// [`outboxkit_core::MAX_SESSIONS_PER_TOKEN`] (16) per token, oldest ended first, and
    /// removes expired ones. Kept so existing configurations still build.
    pub max_sessions: usize,
    /// How long a connection may take to send a request's headers, counted from when the
    /// server starts waiting for that request, so an idle keep-alive connection is closed
    /// after it too (default 10 s). Used by [`crate::serve_with`].
    pub header_read_timeout: Duration,
    /// How long a request's body may take to arrive, counted from its headers (default
    /// 30 s); past it the request gets 408.
    pub body_timeout: Duration,
    /// The most connections served at once (default 512); past it a new connection gets
    /// 503 and is closed at once. Used by [`crate::serve_with`].
    pub max_connections: usize,
    /// Mark the console's cookie `Secure` (default true; turn it off only for plain-http
    /// loopback use, as `outbox serve` does on a loopback address).
    pub secure_cookies: bool,
    /// Where the API and the console are mounted (default `/`): behind a proxy that
    /// forwards `/outbox/…`, `BasePath::new("/outbox")` serves `/outbox/v1/…` and
    /// `/outbox/console`, and every link, redirect and the cookie's `Path` carry the prefix.
    pub base_path: crate::BasePath,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            failed_auth_limit: 10,
            failed_auth_global_limit: 1_000,
            failed_auth_window: Duration::from_secs(60),
            failed_auth_tracked: 10_000,
            body_limit: 64 * 1024,
            enqueue_body_limit: outboxkit_core::Limits::default().max_payload_bytes + 64 * 1024,
            session_ttl: Duration::from_secs(8 * 3600),
            max_sessions: 10_000,
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
            secure_cookies: true,
            base_path: crate::BasePath::default(),
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
    pub failures: Mutex<Failures>,
    /// Console sessions and the audit log (the store's, or this process's).
    pub console: Arc<DynConsoleStore>,
    /// The last login's time in ms: each login is opened at least 1 ms after the one
    /// before, so the oldest of a token's sessions is the one ended first.
    pub last_login: AtomicI64,
    /// The same for audit entries: one server's entries keep the order they were made in.
    pub last_audit: AtomicI64,
}

/// A console session: the token it was opened with and its CSRF token.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub token: TokenId,
    pub scope: TokenScope,
    pub read_only: bool,
    pub csrf: String,
}

impl Session {
    /// The console's view of a stored session.
    pub(crate) fn of(s: ConsoleSession) -> Self {
        Session {
            token: s.token,
            scope: s.scope,
            read_only: s.read_only,
            csrf: s.csrf,
        }
    }
}

/// Failed authentications: per client address (bounded, oldest forgotten first) and over
/// all addresses, each a `(count, window start)`.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    per: HashMap<Option<IpAddr>, (u32, Timestamp)>,
    all: (u32, Option<Timestamp>),
}

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
                console: Arc::new(LocalConsole::default()),
                last_login: AtomicI64::new(0),
                last_audit: AtomicI64::new(0),
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
                    console: i.console.clone(),
                    last_login: AtomicI64::new(0),
                    last_audit: AtomicI64::new(0),
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

    /// Keep console sessions and the audit log in `console` (usually the same store), so
    /// sessions survive a restart. Without it they live in this process only.
    pub fn with_console_store(self, console: Arc<DynConsoleStore>) -> Self {
        self.edit(|i| i.console = console)
    }

    /// Use `config` instead of the defaults.
    pub fn with_config(self, config: ServeConfig) -> Self {
        self.edit(|i| i.config = config)
    }

    /// The settings in use.
    pub fn config(&self) -> &ServeConfig {
        &self.inner.config
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

    /// Seconds this address must still wait before a failed attempt is answered 401 again,
    /// when it (or every address together) is over the failure limit.
    pub(crate) fn blocked(&self, ip: Option<IpAddr>) -> Option<u64> {
        let now = self.now();
        let c = &self.config;
        let f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let wait = |n: u32, start: Timestamp, limit: u32| {
            let end = start.saturating_add(c.failed_auth_window);
            (n >= limit && now < end).then(|| end.duration_since(now).as_secs().max(1))
        };
        let one = f
            .per
            .get(&ip)
            .and_then(|(n, s)| wait(*n, *s, c.failed_auth_limit));
        let all = f
            .all
            .1
            .and_then(|s| wait(f.all.0, s, c.failed_auth_global_limit));
        one.max(all)
    }

    /// Count one failed authentication of this address.
    pub(crate) fn failed(&self, ip: Option<IpAddr>) {
        let now = self.now();
        let window = self.config.failed_auth_window;
        let mut f = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = |start: Timestamp| now >= start.saturating_add(window);
        match f.all.1 {
            Some(s) if !fresh(s) => f.all.0 = f.all.0.saturating_add(1),
            _ => f.all = (1, Some(now)),
        }
        if f.per.len() >= self.config.failed_auth_tracked.max(1) && !f.per.contains_key(&ip) {
            f.per.retain(|_, (_, s)| !fresh(*s));
            if f.per.len() >= self.config.failed_auth_tracked.max(1) {
                let oldest = f.per.iter().min_by_key(|(_, (_, s))| *s).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    f.per.remove(&k);
                }
            }
        }
        let e = f.per.entry(ip).or_insert((0, now));
        if fresh(e.1) {
            *e = (0, now);
        }
        e.0 = e.0.saturating_add(1);
    }

    /// Record one state-changing action in the audit log. A failure to record is logged,
    /// not answered: the action itself is done.
    pub(crate) async fn audit(&self, a: Audit<'_>) {
        let entry = AuditEntry::new(
            self.after(&self.last_audit),
            &*self.entropy,
            a.tenant,
            a.actor,
            a.action,
            outboxkit_core::audit::clean(a.target, outboxkit_core::audit::MAX_AUDIT_FIELD),
        )
        .with_detail(a.detail)
        .with_source(a.source.map(|ip| ip.to_string()));
        if let Err(e) = self.console.record_audit(&entry).await {
            tracing::warn!(error = %e, action = %entry.action, "could not record an audit entry");
        }
    }

    /// The time a new login opens at: now, or 1 ms after the previous login.
    pub(crate) fn login_time(&self) -> Timestamp {
        self.after(&self.last_login)
    }

    /// Now, or 1 ms after the time last taken from `last`.
    fn after(&self, last: &AtomicI64) -> Timestamp {
        let now = self.now().as_unix_millis();
        let prev = last
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(p.max(now - 1) + 1)
            })
            .unwrap_or(now - 1);
        Timestamp::from_unix_millis_clamped(prev.max(now - 1) + 1)
    }

    /// 32 random bytes as hex.
    pub(crate) fn random_hex(&self) -> String {
        let mut b = [0u8; 32];
        self.entropy.fill(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}

/// One audit entry to record ([`Inner::audit`]).
pub(crate) struct Audit<'a> {
    pub tenant: Option<TenantId>,
    pub actor: &'a str,
    pub action: &'a str,
    pub target: &'a str,
    pub detail: String,
    pub source: Option<IpAddr>,
}

/// How the audit log names a token: `token:<id> (<label>)`.
pub(crate) fn actor_of(id: TokenId, label: &str) -> String {
    let label = outboxkit_core::audit::clean(label, 120);
    if label.is_empty() {
        format!("token:{id}")
    } else {
        format!("token:{id} ({label})")
    }
}
