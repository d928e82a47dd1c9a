//! `Delivered<T>` behind a real axum server on loopback and a real PostgreSQL: the handler
//! runs once per id, a failing handler leaves nothing (the retry applies it), and refusals
//! answer with their status before the handler runs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use common::{inbox, secret, signed, NOW_S};
use outboxkit_core::Timestamp;
use outboxkit_inbox::axum::{Delivered, InboxState};
use outboxkit_inbox::postgres::InboxTable;
use outboxkit_testing::conformance::backend_unavailable;
use outboxkit_testing::ManualClock;
use sqlx::postgres::PgPoolOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(serde::Deserialize, Debug)]
struct Order {
    id: u32,
    fail: bool,
}

async fn hook(d: Delivered<Order>) -> StatusCode {
    let mut tx = d.tx;
    let wrote = sqlx::query("INSERT INTO inbox_axum.effects VALUES ($1, $2)")
        .bind(&d.id)
        .bind(d.event.id as i32)
        .execute(&mut *tx)
        .await;
    if d.event.fail || wrote.is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR; // tx dropped: rolled back
    }
    match tx.commit().await {
        Ok(()) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// POST `body` with `headers` to `addr` over HTTP/1.1; the response status.
async fn post_to(addr: std::net::SocketAddr, headers: &[(String, String)], body: &[u8]) -> u16 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "POST /hooks HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        req += &format!("{n}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    text.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_handler_runs_once_per_id_and_refusals_never_reach_it() {
    let url = std::env::var("OUTBOX_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&url)
        .await
    {
        Ok(p) => p,
        Err(e) => return backend_unavailable("postgres", e).unwrap_or(()),
    };
    sqlx::raw_sql(
        "DROP SCHEMA IF EXISTS inbox_axum CASCADE; CREATE SCHEMA inbox_axum; \
         CREATE TABLE inbox_axum.effects (webhook_id text NOT NULL, order_id int NOT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let table = InboxTable::new("inbox_axum", "inbox", "shop").unwrap();
    table.migrate(&pool).await.unwrap();
    let state = InboxState {
        inbox: Arc::new(inbox()),
        table,
        pool: pool.clone(),
        clock: ManualClock::at(Timestamp::from_unix_millis(NOW_S * 1000).unwrap()),
    };
    let app = Router::new().route("/hooks", post(hook)).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let ok = br#"{"id":7,"fail":false}"#;
    let h = signed(&secret(), "msg_ok", NOW_S, ok);
    assert_eq!(post_to(addr, &h, ok).await, 200);
    assert_eq!(
        post_to(addr, &h, ok).await,
        200,
        "a duplicate is answered 200"
    );

    let failing = br#"{"id":8,"fail":true}"#;
    let h = signed(&secret(), "msg_fail", NOW_S, failing);
    assert_eq!(post_to(addr, &h, failing).await, 500);
    assert_eq!(
        post_to(addr, &h, failing).await,
        500,
        "nothing was recorded: it runs again"
    );

    let forged = signed(&secret(), "msg_forged", NOW_S, b"{}");
    assert_eq!(post_to(addr, &forged, ok).await, 401);
    let stale = signed(&secret(), "msg_stale", NOW_S - 3600, ok);
    assert_eq!(post_to(addr, &stale, ok).await, 400);
    let big = vec![b' '; 2048];
    let h = signed(&secret(), "msg_big", NOW_S, &big);
    assert_eq!(post_to(addr, &h, &big).await, 413);
    let not_json = b"hello";
    let h = signed(&secret(), "msg_text", NOW_S, not_json);
    assert_eq!(post_to(addr, &h, not_json).await, 400);

    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT webhook_id, order_id FROM inbox_axum.effects ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![("msg_ok".to_owned(), 7)],
        "one effect, applied once"
    );
}
