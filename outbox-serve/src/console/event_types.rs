//! The console's event-types page: the global catalogue, its mode, each type with its
//! description and schema (as escaped, indented JSON text). Read-only: the catalogue is
//! changed through the API or `outbox event-types` with an admin token.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::{error_page, page, User};
use crate::html::esc;
use crate::state::Serve;

pub(super) async fn event_types(State(s): State<Serve>, user: User) -> Response {
    let store = &s.inner.store;
    let (types, mode) = match (store.list_event_types().await, store.catalogue_mode().await) {
        (Ok(t), Ok(m)) => (t, m),
        (Err(e), _) | (_, Err(e)) => return error_page(&user, &e.into()),
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>Event types</h1><p>Mode: <strong id=\"catalogue-mode\">{}</strong> \
         (<code>off</code>: nothing checked; <code>refuse-unknown</code>: unregistered topics \
         refused; <code>validate</code>: payloads checked against their schema too).</p>",
        esc(mode.as_str())
    );
    if types.is_empty() {
        body.push_str("<p>No event type is registered.</p>");
    } else {
        body.push_str(
            "<table><thead><tr><th>Topic</th><th>Description</th><th>Schema</th>\
             <th>Updated</th></tr></thead><tbody>",
        );
        for t in &types {
            let schema = match &t.schema {
                Some(v) => format!(
                    "<pre class=\"mono\">{}</pre>",
                    esc(&serde_json::to_string_pretty(v).unwrap_or_default())
                ),
                None => "—".to_owned(),
            };
            let _ = write!(
                body,
                "<tr><td class=\"mono\">{}</td><td>{}</td><td>{schema}</td><td>{}</td></tr>",
                esc(t.topic.as_str()),
                esc(&t.description),
                esc(&t.updated_at.to_rfc3339()),
            );
        }
        body.push_str("</tbody></table>");
    }
    page(Some((&user, "event-types")), "Event types", &body).into_response()
}
