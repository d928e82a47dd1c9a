#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod api;
mod audit;
mod auth;
mod base_path;
mod console;
mod html;
mod local_console;
mod openapi;
pub mod problem;
mod routes;
mod server;
mod state;
pub mod views;

pub use base_path::BasePath;
pub use openapi::document as openapi_document;
pub use routes::{API_ROUTES, CSP};
pub use server::serve_with;
pub use state::{Serve, ServeConfig};

/// Serve `router` on `listener` until `shutdown` completes, then finish the requests in
/// flight, with the default connection settings of [`ServeConfig`] (see [`serve_with`]).
/// Client addresses reach the failed-authentication limiter.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, ServeConfig::default(), shutdown).await
}
