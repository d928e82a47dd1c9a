//! Serving connections: HTTP/1.1 with a header-read timeout (which also closes idle
//! keep-alive connections), a cap on connections served at once, and the body rules every
//! request meets before a handler runs (413 on a declared or actual size over the limit,
//! 408 when the body is too slow).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::problem::Problem;
use crate::state::{Serve, ServeConfig};

/// What a connection past `max_connections` gets before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
connection: close\r\nretry-after: 1\r\ncontent-length: 99\r\n\r\n\
{\"type\":\"urn:outbox:problem:busy\",\"title\":\"Too many connections\",\"status\":503,\"detail\":\"try again\"}";

/// Serve `router` on `listener` until `shutdown` completes, then finish the requests in
/// flight, with `config`'s connection settings (`header_read_timeout`, `max_connections`).
/// Client addresses reach the failed-authentication limiter.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    config: ServeConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let header_timeout = config.header_read_timeout;
    let (close_tx, close_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted:
                    // keep serving the connections there are.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while tasks.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Full: say so if the socket takes it at once, and close.
            let _ = stream.try_write(BUSY);
            drop(stream);
            continue;
        };
        let app = router.clone();
        let service = hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(ConnectInfo::<SocketAddr>(addr));
            let app = app.clone();
            async move {
                Ok::<_, Infallible>(
                    tower::ServiceExt::oneshot(app, req.map(Body::new))
                        .await
                        .unwrap_or_else(|never| match never {}),
                )
            }
        });
        let mut closing = close_rx.clone();
        tasks.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = close_tx.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Every request's body, before the handler: a declared `Content-Length` over the limit is
/// 413 before a byte is read; the body is read within `body_timeout` (else 408) and up to
/// the limit (else 413).
pub(crate) async fn read_body(
    axum::extract::State(s): axum::extract::State<Serve>,
    req: Request<Body>,
    next: axum::middleware::Next,
) -> Response {
    let c = &s.inner.config;
    let limit = if is_enqueue(&req) {
        c.enqueue_body_limit
    } else {
        c.body_limit
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large().into_response();
    }
    if axum::body::HttpBody::size_hint(req.body()).exact() == Some(0) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(c.body_timeout, axum::body::to_bytes(body, limit)).await
    {
        Ok(Ok(b)) => b,
        Ok(Err(e)) if over_limit(&e) => return too_large().into_response(),
        Ok(Err(_)) => {
            return Problem::bad_request("the body could not be read").into_response();
        }
        Err(_) => {
            return Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "The body did not arrive in time",
            )
            .into_response()
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `POST /v1/tenants/{tenant}/messages`, whose body may be as large as a payload.
fn is_enqueue(req: &Request<Body>) -> bool {
    req.method() == axum::http::Method::POST
        && req
            .uri()
            .path()
            .strip_prefix("/v1/tenants/")
            .and_then(|rest| rest.split_once('/'))
            .is_some_and(|(tenant, rest)| !tenant.is_empty() && rest == "messages")
}

fn over_limit(e: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

fn too_large() -> Problem {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too-large",
        "The body is too large",
    )
}
