//! An axum service on PostgreSQL that writes an order and its event in one transaction, runs a
//! dispatcher (an in-process handler and a signed webhook) beside the HTTP server, receives
//! its own webhooks on a route that verifies the Standard Webhooks signature, and shuts
//! everything down on one signal.
//!
//! ```sh
//! cargo run -p outboxkit-examples --example axum_orders        # serves until Ctrl-C
//! curl -X POST localhost:3000/orders -H 'content-type: application/json' -d '{"item":"tea"}'
//! cargo run -p outboxkit-examples --example axum_orders -- --self-test   # what CI runs
//! ```
//!
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`) names the database,
//! `PORT` the port (default 3000; 0 in the self-test). The outbox and the `orders` table live
//! in the schema `OUTBOX_SCHEMA` (default `outbox_example`); the self-test uses a fresh
//! schema and drops it at the end.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use outboxkit_core::{
    DynStore, Message, NewMessage, OsEntropy, PlaintextVault, SystemClock, TenantId, Verifier,
};
use outboxkit_dispatch::{Context, Dispatcher, EndpointAdmin, HandlerResult, NewEndpoint};
use outboxkit_examples::Shutdown;
use outboxkit_http::{EgressPolicy, HttpTransport};
use outboxkit_postgres::sqlx::{self, postgres::PgPoolOptions, PgPool};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use serde::Deserialize;
use tokio::sync::Notify;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone)]
struct App {
    pool: PgPool,
    store: PostgresStore,
    schema: String,
    verifier: Arc<Verifier>,
    seen: Arc<Seen>,
}

/// What this process saw arrive, so the self-test knows when it is done.
#[derive(Default)]
struct Seen {
    webhooks: AtomicUsize,
    handled: AtomicUsize,
    changed: Notify,
}

#[derive(Deserialize)]
struct NewOrder {
    item: String,
}

/// `POST /orders`: the order row and its `order.created` event commit together, or neither.
async fn create_order(
    State(app): State<App>,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<serde_json::Value>), (StatusCode, String)> {
    let fail = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let mut tx = app.pool.begin().await.map_err(|e| fail(&e))?;
    let insert = format!(
        "INSERT INTO \"{}\".orders (item) VALUES ($1) RETURNING id",
        app.schema
    );
    let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(insert))
        .bind(&order.item)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| fail(&e))?;
    let event = NewMessage::new(
        "order.created",
        serde_json::json!({ "id": id, "item": order.item }),
    )
    .ordering_key(format!("order:{id}"));
    app.store
        .enqueue_in(&mut tx, event)
        .await
        .map_err(|e| fail(&e))?;
    tx.commit().await.map_err(|e| fail(&e))?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": id }))))
}

/// `POST /hooks/orders`: a receiver. It verifies the signature over the body exactly as
/// received, before parsing it, and answers 2xx only to a valid request.
async fn receive_webhook(State(app): State<App>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if app.verifier.verify(&headers, &body).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    app.seen.webhooks.fetch_add(1, Ordering::SeqCst);
    app.seen.changed.notify_waiters();
    StatusCode::NO_CONTENT
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let self_test = std::env::args().any(|a| a == "--self-test");
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = match (self_test, std::env::var("OUTBOX_SCHEMA")) {
        (_, Ok(s)) => s,
        (true, Err(_)) => format!("outbox_example_{}", std::process::id()),
        (false, Err(_)) => "outbox_example".into(),
    };
    let port: u16 = match std::env::var("PORT") {
        Ok(p) => p.parse()?,
        Err(_) if self_test => 0,
        Err(_) => 3000,
    };

    // The store, its schema, and the application's own table beside it.
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await?;
    let config = PostgresConfig {
        schema: schema.clone(),
        ..PostgresConfig::default()
    };
    let clock = Arc::new(SystemClock);
    let entropy = Arc::new(OsEntropy);
    let store = PostgresStore::new(pool.clone(), config, clock.clone(), entropy.clone())?;
    store.migrate().await?;
    let create = format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".orders (id bigserial PRIMARY KEY, item text NOT NULL)"
    );
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(&pool)
        .await?;
    let dyn_store: Arc<DynStore> = Arc::new(store.clone());

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;

    // A webhook endpoint pointing at this process's own receiver. Loopback and plain http
    // are refused by default; this example allows them for itself.
    let egress = EgressPolicy::default().allow_http(true).allow_private(true);
    let vault = Arc::new(PlaintextVault); // `AeadVault` with a key from your secret store
    let admin = EndpointAdmin::new(dyn_store.clone(), vault.clone(), clock, entropy)
        .with_url_policy(Arc::new(egress.clone()));
    let (endpoint, secret) = admin
        .create(
            &TenantId::default(),
            NewEndpoint {
                url: format!("http://{addr}/hooks/orders"),
                filter: "order.*".into(),
                ..NewEndpoint::default()
            },
        )
        .await?;
    let verifier = Arc::new(Verifier::new([secret])?);

    let seen = Arc::new(Seen::default());
    let handler_seen = seen.clone();
    let dispatcher = Dispatcher::builder(dyn_store.clone())
        .handler(
            "send-receipt",
            "order.created",
            move |ctx: Context, msg: Message| {
                let seen = handler_seen.clone();
                async move {
                    println!("receipt for {} (attempt {})", msg.id, ctx.attempt());
                    seen.handled.fetch_add(1, Ordering::SeqCst);
                    seen.changed.notify_waiters();
                    HandlerResult::Ok
                }
            },
        )
        .webhooks(Arc::new(HttpTransport::new(egress)?), vault)
        .build()?;
    dispatcher.register().await?; // before the first enqueue, so fan-out sees the handler

    let app = App {
        pool: pool.clone(),
        store,
        schema: schema.clone(),
        verifier,
        seen: seen.clone(),
    };
    let router = Router::new()
        .route("/orders", post(create_order))
        .route("/hooks/orders", post(receive_webhook))
        .with_state(app);

    // One signal stops both the server and the dispatcher.
    let shutdown = Shutdown::new();
    let server = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.wait().await })
                .await
        })
    };
    let dispatch = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { dispatcher.run(async move { shutdown.wait().await }).await })
    };
    println!("listening on http://{addr} (endpoint {})", endpoint.id);

    let outcome = if self_test {
        let outcome =
            tokio::time::timeout(Duration::from_secs(60), place_orders(addr, &seen)).await;
        shutdown.trigger();
        Some(outcome)
    } else {
        None
    };
    server.await??;
    let report = dispatch.await??;
    println!(
        "stopped: {} deliveries succeeded in this run",
        report.succeeded
    );

    if let Some(outcome) = outcome {
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        sqlx::query(sqlx::AssertSqlSafe(drop))
            .execute(&pool)
            .await?;
        outcome.map_err(|_| "the self-test timed out")??;
        println!("self-test passed");
    }
    Ok(())
}

/// The self-test: place three orders through the HTTP API and wait until each reached both
/// the handler and the verified webhook receiver.
async fn place_orders(addr: std::net::SocketAddr, seen: &Seen) -> Result<(), Error> {
    const ORDERS: usize = 3;
    let client = outboxkit_http::client_builder().build()?;
    for item in ["tea", "bread", "jam"] {
        let reply = client
            .post(format!("http://{addr}/orders"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "item": item }).to_string())
            .send()
            .await?;
        if reply.status() != reqwest::StatusCode::CREATED {
            return Err(format!("POST /orders answered {}", reply.status()).into());
        }
    }
    loop {
        let changed = seen.changed.notified();
        let (webhooks, handled) = (
            seen.webhooks.load(Ordering::SeqCst),
            seen.handled.load(Ordering::SeqCst),
        );
        if webhooks >= ORDERS && handled >= ORDERS {
            println!("{webhooks} verified webhooks and {handled} receipts");
            return Ok(());
        }
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}
