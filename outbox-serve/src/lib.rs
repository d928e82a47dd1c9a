#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod api;
mod auth;
mod console;
mod html;
mod openapi;
pub mod problem;
mod routes;
mod state;
pub mod views;

pub use openapi::document as openapi_document;
pub use routes::{API_ROUTES, CSP};
pub use state::{Serve, ServeConfig};

/// Serve `router` on `listener` until `shutdown` completes, then finish the requests in
/// flight. Client addresses reach the failed-authentication limiter.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
