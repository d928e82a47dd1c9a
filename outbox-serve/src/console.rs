pub(crate) fn routes() -> axum::Router<crate::state::Serve> { axum::Router::new() }
