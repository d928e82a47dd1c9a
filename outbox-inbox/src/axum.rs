//! An axum extractor: `Delivered<T>` verifies the request, records its id in a fresh
//! PostgreSQL transaction and hands the handler the parsed event with that transaction.
//!
//! ```text
//! async fn hook(d: Delivered<OrderCreated>) -> Result<StatusCode, StatusCode> {
//!     let mut tx = d.tx;
//!     apply(&mut tx, &d.event).await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
//!     tx.commit().await.map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
//!     Ok(StatusCode::OK)
//! }
//! ```
//!
//! The extractor answers by itself, before the handler runs: a refused request with its
//! status (401, 400, 413), a duplicate with 200 (applied before; the handler does not run
//! again), a body that is not the event's JSON with 400 (the sender's retry would fail the
//! same way), and a database failure with 503 (the sender retries). A handler that fails
//! drops the transaction: the record rolls back with the effect and the retry applies it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use outboxkit_core::Clock;
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgPool, Postgres};

use crate::postgres::InboxTable;
use crate::{Inbox, Recorded};

/// What the extractor needs, in the router's state (or reachable by `FromRef`).
#[derive(Clone)]
pub struct InboxState {
    /// The checks.
    pub inbox: Arc<Inbox>,
    /// Where ids are recorded.
    pub table: InboxTable,
    /// The application's pool: the transaction is begun on it.
    pub pool: PgPool,
    /// The time a record is stamped with (for retention).
    pub clock: Arc<dyn Clock>,
}

/// A verified, first-seen event and the open transaction its id is recorded in: apply the
/// event in `tx`, then commit it.
pub struct Delivered<T> {
    /// The `webhook-id`.
    pub id: String,
    /// The body parsed as `T`.
    pub event: T,
    /// The transaction holding the id's record.
    pub tx: sqlx::Transaction<'static, Postgres>,
}

impl std::fmt::Debug for InboxState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxState")
            .field("inbox", &self.inbox)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Delivered<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivered")
            .field("id", &self.id)
            .field("event", &self.event)
            .finish_non_exhaustive()
    }
}

/// The extractor's own answer (see the module docs).
#[derive(Debug)]
pub struct Answered(StatusCode, &'static str);

impl IntoResponse for Answered {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

impl<S, T> FromRequest<S> for Delivered<T>
where
    InboxState: FromRef<S>,
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = Answered;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let st = InboxState::from_ref(state);
        let headers = req.headers().clone();
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|_| Answered(StatusCode::PAYLOAD_TOO_LARGE, "the body could not be read"))?;
        let received = st.inbox.check(&headers, &body).map_err(|r| {
            let status = StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_REQUEST);
            Answered(status, "refused")
        })?;
        let event: T = serde_json::from_slice(&received.body).map_err(|_| {
            Answered(
                StatusCode::BAD_REQUEST,
                "the body is not the expected event",
            )
        })?;
        let unavailable = |_| Answered(StatusCode::SERVICE_UNAVAILABLE, "the inbox is unavailable");
        let mut tx = st.pool.begin().await.map_err(unavailable)?;
        let now = st.clock.now().as_unix_millis();
        match st
            .table
            .record(&mut tx, &received, now)
            .await
            .map_err(unavailable)?
        {
            Recorded::First => Ok(Delivered {
                id: received.id,
                event,
                tx,
            }),
            Recorded::Duplicate => Err(Answered(StatusCode::OK, "already processed")),
        }
    }
}
