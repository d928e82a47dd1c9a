//! An app over a fresh store (a temporary SQLite file, or a PostgreSQL schema of its own),
//! with tokens of every kind, and helpers to call it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use outboxkit_core::endpoint::AnyUrl;
use outboxkit_core::tokens::{ApiToken, TokenAccess, TokenScope, TokenStore};
use outboxkit_core::{
    Clock, ConsoleStore, DeliveryStatus, EndpointId, EntropyExt, Ledger, MessageStore, NewMessage,
    OsEntropy, PlaintextVault, RetryPolicy, Store, SystemClock, TenantId, TenantPolicy,
};
use outboxkit_dispatch::Dispatcher;
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use outboxkit_serve::{Serve, ServeConfig};
use outboxkit_sqlite::{SqliteConfig, SqliteStore};
use outboxkit_testing::conformance::backend_unavailable;
use serde_json::Value;

type Cleanup =
    Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

/// A store under test and what it needs to be cleaned up.
pub struct App {
    pub router: Router,
    pub store: Arc<dyn Store>,
    pub tokens: Arc<dyn TokenStore>,
    /// Its console sessions and audit log.
    pub console: Arc<dyn ConsoleStore>,
    /// The tenant the tokens below are scoped to.
    pub tenant: TenantId,
    /// All tenants.
    pub admin: String,
    /// `acme`, read and write.
    pub writer: String,
    /// `acme`, read-only.
    pub reader: String,
    /// `acme`, enqueue-only.
    pub enqueuer: String,
    /// `other`, read and write.
    pub other: String,
    /// A revoked `acme` token.
    pub revoked: String,
    /// The `base_path` the router is mounted under (empty at the root).
    pub prefix: String,
    cleanup: Option<Cleanup>,
    _dir: Option<tempfile::TempDir>,
}

pub fn loopback() -> Arc<HttpTransport> {
    Arc::new(
        HttpTransport::new(
            EgressPolicy::default()
                .allow_http(true)
                .allow_cidr("127.0.0.1/32")
                .unwrap(),
        )
        .unwrap(),
    )
}

pub fn config() -> ServeConfig {
    ServeConfig {
        failed_auth_limit: 1000,
        secure_cookies: false,
        ..ServeConfig::default()
    }
}

pub async fn issue(
    tokens: &dyn TokenStore,
    scope: TokenScope,
    read_only: bool,
) -> (ApiToken, String) {
    let access = if read_only {
        TokenAccess::ReadOnly
    } else {
        TokenAccess::Full
    };
    issue_with(tokens, scope, access).await
}

pub async fn issue_with(
    tokens: &dyn TokenStore,
    scope: TokenScope,
    access: TokenAccess,
) -> (ApiToken, String) {
    let (t, text) = ApiToken::issue(scope, access, "test", SystemClock.now(), &OsEntropy).unwrap();
    tokens.create_token(&t).await.unwrap();
    (t, text)
}

impl App {
    async fn over<S: Store + TokenStore + ConsoleStore + Clone>(s: S, config: ServeConfig) -> App {
        let store: Arc<dyn Store> = Arc::new(s.clone());
        let console: Arc<dyn ConsoleStore> = Arc::new(s.clone());
        let tokens: Arc<dyn TokenStore> = Arc::new(s);
        let serve = Serve::new(
            store.clone(),
            tokens.clone(),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .with_vault(Arc::new(PlaintextVault))
        .with_url_policy(Arc::new(AnyUrl))
        .with_transport(loopback())
        .with_console_store(console.clone())
        .with_config(config.clone());
        let acme = TenantId::new("acme").unwrap();
        let other = TenantId::new("other").unwrap();
        let t = &*tokens;
        let (_, admin) = issue(t, TokenScope::Admin, false).await;
        let (_, writer) = issue(t, TokenScope::Tenant(acme.clone()), false).await;
        let (_, reader) = issue(t, TokenScope::Tenant(acme.clone()), true).await;
        let (_, enqueuer) = issue_with(
            t,
            TokenScope::Tenant(acme.clone()),
            TokenAccess::EnqueueOnly,
        )
        .await;
        let (_, other_t) = issue(t, TokenScope::Tenant(other), false).await;
        let (r, revoked) = issue(t, TokenScope::Tenant(acme.clone()), false).await;
        t.revoke_token(r.id, SystemClock.now()).await.unwrap();
        App {
            router: serve.router(),
            store,
            tokens,
            console,
            tenant: acme,
            admin,
            writer,
            reader,
            enqueuer,
            other: other_t,
            revoked,
            prefix: config.base_path.prefix().to_owned(),
            cleanup: None,
            _dir: None,
        }
    }

    /// Over a fresh SQLite file.
    pub async fn sqlite_with(config: ServeConfig) -> App {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(
            SqliteConfig::new(dir.path().join("outbox.db")),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .await
        .unwrap();
        let mut app = App::over(s, config).await;
        app._dir = Some(dir);
        app
    }

    pub async fn sqlite() -> App {
        App::sqlite_with(config()).await
    }

    /// Over a fresh PostgreSQL schema (`None` when the server is unreachable and not
    /// required).
    pub async fn postgres() -> Option<App> {
        let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = match outboxkit_postgres::sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&url)
            .await
        {
            Ok(p) => p,
            Err(e) => return backend_unavailable("postgres", e),
        };
        let schema = format!("outbox_serve_test_{:016x}", OsEntropy.next_u64());
        let s = PostgresStore::new(
            pool.clone(),
            PostgresConfig::new(schema.clone()),
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .unwrap();
        s.migrate().await.unwrap();
        let mut app = App::over(s, config()).await;
        app.cleanup = Some(Box::new(move || {
            Box::pin(async move {
                let _ = outboxkit_postgres::sqlx::query(outboxkit_postgres::sqlx::AssertSqlSafe(
                    format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
                ))
                .execute(&pool)
                .await;
                pool.close().await;
            })
        }));
        Some(app)
    }

    /// Drop the schema (PostgreSQL).
    pub async fn finish(mut self) {
        if let Some(c) = self.cleanup.take() {
            c().await;
        }
    }

    /// Call the router: `(status, headers, JSON body or Null)`.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Value) {
        let uri = format!("{}{uri}", self.prefix);
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = match body {
            Some(b) => req
                .header("content-type", "application/json")
                .body(Body::from(b.to_owned())),
            None => req.body(Body::empty()),
        }
        .unwrap();
        let res = tower::ServiceExt::oneshot(self.router.clone(), req)
            .await
            .unwrap();
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (status, headers, v)
    }

    pub async fn get(&self, uri: &str, token: &str) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Method::GET, uri, Some(token), None).await;
        (s, v)
    }

    pub async fn post(&self, uri: &str, token: &str, body: Option<&str>) -> (StatusCode, Value) {
        let (s, _, v) = self.call(Method::POST, uri, Some(token), body).await;
        (s, v)
    }

    /// Create an endpoint of `acme` to `url` through the API; its id.
    pub async fn endpoint(&self, url: &str) -> EndpointId {
        let body = serde_json::json!({ "url": url, "description": "receiver" }).to_string();
        let (s, v) = self
            .post("/v1/tenants/acme/endpoints", &self.writer, Some(&body))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        EndpointId::parse(v["endpoint"]["id"].as_str().unwrap()).unwrap()
    }

    /// Enqueue `n` events of `acme` (fanned out to its endpoints).
    pub async fn enqueue(&self, topic: &str, n: u32) {
        for i in 0..n {
            self.store
                .enqueue(
                    NewMessage::new(topic, serde_json::json!({ "n": i }))
                        .tenant(self.tenant.as_str()),
                )
                .await
                .unwrap();
        }
    }

    /// A dispatcher delivering webhooks to loopback receivers with one retry 300 ms later.
    pub fn dispatcher(&self) -> Dispatcher {
        Dispatcher::builder(self.store.clone())
            .config(outboxkit_dispatch::DispatcherConfig {
                park_delay: Duration::from_millis(10),
                poll_interval: Duration::from_millis(100),
                ..Default::default()
            })
            .webhooks(loopback(), Arc::new(PlaintextVault))
            .webhook_policy(TenantPolicy::uniform(
                RetryPolicy::schedule(vec![Duration::from_millis(300)]).unwrap(),
            ))
            .build()
            .unwrap()
    }

    /// Run the dispatcher until `n` deliveries of `acme` have `status`.
    pub async fn dispatch_until(&self, status: DeliveryStatus, n: usize) {
        let d = self.dispatcher();
        for _ in 0..600 {
            let r = d.run_once(Duration::from_secs(60)).await.unwrap();
            if std::env::var_os("SERVE_DEBUG").is_some() {
                eprintln!("{r:?}");
            }
            let f = outboxkit_core::DeliveryFilter {
                status: Some(status),
                ..Default::default()
            };
            let page = self
                .store
                .list_deliveries(&self.tenant, &f, outboxkit_core::PageRequest::first(1000))
                .await
                .unwrap();
            if page.items.len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the deliveries did not become {status}");
    }
}
