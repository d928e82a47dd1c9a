//! Two services closing the loop: A's outbox delivers signed webhooks to B's inbox, and B
//! applies each event once however often it arrives.
//!
//! ```text
//! inbox-pair send    --db URL --schema A                      # A: the dispatcher
//! inbox-pair receive --db URL --schema B --port P --secret S  # B: axum + Delivered<T>
//! ```
//!
//! `send` runs A's dispatcher (webhooks over plain http to loopback, a short retry schedule,
//! no circuit breaker) until killed. `receive` serves `POST /hooks` with
//! `outboxkit_inbox::axum::Delivered`: the event's effect (a row in `B.effects`) and its
//! dedup record commit in one transaction. `tests/inbox_kill.rs` kills both with SIGKILL at
//! random points and checks nothing is lost and nothing is applied twice.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use outboxkit_core::{
    DynStore, OsEntropy, PlaintextVault, RetryPolicy, SystemClock, TenantPolicy, Verifier,
    WebhookSecret,
};
use outboxkit_dispatch::{Dispatcher, DispatcherConfig};
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_inbox::axum::{Delivered, InboxState};
use outboxkit_inbox::postgres::InboxTable;
use outboxkit_inbox::Inbox;
use outboxkit_postgres::sqlx::{self, postgres::PgPoolOptions};
use outboxkit_postgres::{PostgresConfig, PostgresStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The event A sends, in the Standard Webhooks envelope (`{"type", "timestamp", "data"}`).
#[derive(serde::Deserialize)]
struct Event {
    data: Data,
}

#[derive(serde::Deserialize)]
struct Data {
    n: i64,
}

fn arg(name: &str) -> Result<String, Error> {
    let args: Vec<String> = std::env::args().collect();
    let at = args
        .iter()
        .position(|a| a == name)
        .ok_or_else(|| format!("missing {name}"))?;
    Ok(args
        .get(at + 1)
        .ok_or_else(|| format!("{name} needs a value"))?
        .clone())
}

/// The schema names the pair accepts (they are written into statements).
fn plain(name: &str) -> Result<String, Error> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(name.to_owned())
    } else {
        Err(format!("`{name}` is not a plain schema name").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    match std::env::args().nth(1).as_deref() {
        Some("send") => send().await,
        Some("receive") => receive().await,
        _ => Err("usage: inbox-pair send|receive …".into()),
    }
}

/// A: the dispatcher over the outbox in `--schema`.
async fn send() -> Result<(), Error> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&arg("--db")?)
        .await?;
    let config = PostgresConfig {
        schema: plain(&arg("--schema")?)?,
        ..PostgresConfig::default()
    };
    let store = PostgresStore::new(pool, config, Arc::new(SystemClock), Arc::new(OsEntropy))?;
    let store: Arc<DynStore> = Arc::new(store);
    let egress = EgressPolicy::default().allow_http(true).allow_private(true);
    let retry = RetryPolicy::schedule(vec![Duration::from_millis(300); 60])?;
    let dispatcher = Dispatcher::builder(store)
        .config(DispatcherConfig {
            lease: Duration::from_secs(3),
            poll_interval: Duration::from_millis(100),
            webhook_timeout: Duration::from_secs(1),
            reservation_margin: Duration::from_millis(200),
            breaker_threshold: None,
            ..DispatcherConfig::default()
        })
        .webhooks(
            Arc::new(HttpTransport::new(egress)?),
            Arc::new(PlaintextVault),
        )
        .webhook_policy(TenantPolicy::uniform(retry))
        .build()?;
    dispatcher.run(std::future::pending()).await?;
    Ok(())
}

/// B: the receiver, applying each event once in `--schema`.
async fn receive() -> Result<(), Error> {
    let schema = plain(&arg("--schema")?)?;
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&arg("--db")?)
        .await?;
    let table = InboxTable::new(&schema, "inbox", "service_a")?;
    table.migrate(&pool).await?;
    let create = format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".effects (webhook_id text NOT NULL, n bigint NOT NULL)"
    );
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(&pool)
        .await?;
    let secret = WebhookSecret::parse(&arg("--secret")?)?;
    let state = InboxState {
        inbox: Arc::new(Inbox::new(Verifier::new([secret])?)),
        table,
        pool,
        clock: Arc::new(SystemClock),
    };
    let insert: Arc<str> = format!("INSERT INTO \"{schema}\".effects VALUES ($1, $2)").into();
    let app = Router::new()
        .route(
            "/hooks",
            post(move |d: Delivered<Event>| {
                let insert = insert.clone();
                async move {
                    let mut tx = d.tx;
                    let applied = sqlx::query(sqlx::AssertSqlSafe(insert))
                        .bind(&d.id)
                        .bind(d.event.data.n)
                        .execute(&mut *tx)
                        .await;
                    match applied {
                        Ok(_) => match tx.commit().await {
                            Ok(()) => StatusCode::OK,
                            Err(_) => StatusCode::SERVICE_UNAVAILABLE,
                        },
                        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
                    }
                }
            }),
        )
        .with_state(state);
    let port: u16 = arg("--port")?.parse()?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
