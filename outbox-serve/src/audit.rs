//! The audit log of the API: every successful call that changes something (every method
//! but `GET`/`HEAD`, `POST …/messages` aside: enqueues are the data plane, kept in the
//! ledger) is recorded after it answered 2xx, with the token that made it, the route as
//! `noun.verb`, its target and the client's address. The extractors in `auth.rs` name the
//! caller in the request's [`ActorSlot`]; [`record`] writes the entry.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use outboxkit_core::TenantId;

use crate::state::{Audit, Serve};

/// Where the extractor of a write names its caller (`token:<id> (<label>)`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ActorSlot(Arc<Mutex<Option<String>>>);

impl ActorSlot {
    pub(crate) fn set(&self, actor: String) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(actor);
    }

    fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// What a route does, as the audit log names it: `(tenant, action, target)` from the
/// route's template and the request's path. `None` for a route that is not audited.
pub(crate) fn describe(
    method: &Method,
    template: &str,
    path: &str,
) -> Option<(Option<TenantId>, String, String)> {
    let t: Vec<&str> = template.trim_start_matches('/').split('/').collect();
    let p: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if t.len() != p.len() || t.first() != Some(&"v1") {
        return None;
    }
    let (mut t, mut p) = (&t[1..], &p[1..]);
    let mut tenant = None;
    if t.first() == Some(&"tenants") && t.len() >= 3 {
        tenant = TenantId::new(p[1]).ok();
        (t, p) = (&t[2..], &p[2..]);
    }
    let noun = match *t.first()? {
        "endpoints" => "endpoint",
        "deliveries" => "delivery",
        "messages" => "message",
        "event-types" => "event_type",
        "consumers" => "consumer",
        "catalogue" => "catalogue",
        _ => return None,
    };
    if noun == "message" && t.len() == 1 {
        return None;
    }
    let param = |i: usize| t.get(i).is_some_and(|s| s.starts_with('{'));
    let by_method = match *method {
        Method::POST => "create",
        Method::PATCH => "update",
        Method::PUT => "put",
        Method::DELETE => "delete",
        _ => return None,
    };
    let (verb, target) = match t.len() {
        1 => (by_method, String::new()),
        2 if param(1) => (by_method, p[1].to_owned()),
        2 => (t[1], String::new()),
        3 if param(1) => (t[2], p[1].to_owned()),
        _ => return None,
    };
    let target = if target.is_empty() {
        tenant.as_ref().map(|t| t.to_string()).unwrap_or_default()
    } else {
        target
    };
    Some((tenant, format!("{noun}.{verb}"), target))
}

/// The middleware: run the call, and record it when it changed something and succeeded.
pub(crate) async fn record(State(s): State<Serve>, mut req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let Some(template) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
    else {
        return next.run(req).await;
    };
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let Some((tenant, action, target)) = describe(&method, &template, &path) else {
        return next.run(req).await;
    };
    let ip = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let slot = ActorSlot::default();
    req.extensions_mut().insert(slot.clone());
    let res = next.run(req).await;
    if res.status().is_success() {
        if let Some(actor) = slot.take() {
            s.inner
                .audit(Audit {
                    tenant,
                    actor: &actor,
                    action: &action,
                    target: &target,
                    detail: format!("{method} {path} {}", res.status().as_u16()),
                    source: ip,
                })
                .await;
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_named() {
        let t = "/v1/tenants/{tenant}";
        let rows = [
            (
                Method::POST,
                format!("{t}/endpoints"),
                "/v1/tenants/acme/endpoints",
                Some(("endpoint.create", "acme")),
            ),
            (
                Method::PATCH,
                format!("{t}/endpoints/{{id}}"),
                "/v1/tenants/acme/endpoints/e1",
                Some(("endpoint.update", "e1")),
            ),
            (
                Method::POST,
                format!("{t}/endpoints/{{id}}/pause"),
                "/v1/tenants/acme/endpoints/e1/pause",
                Some(("endpoint.pause", "e1")),
            ),
            (
                Method::POST,
                format!("{t}/deliveries/bulk"),
                "/v1/tenants/acme/deliveries/bulk",
                Some(("delivery.bulk", "acme")),
            ),
            (
                Method::POST,
                format!("{t}/deliveries/{{id}}/replay"),
                "/v1/tenants/acme/deliveries/d1/replay",
                Some(("delivery.replay", "d1")),
            ),
            (
                Method::POST,
                format!("{t}/messages"),
                "/v1/tenants/acme/messages",
                None,
            ),
            (
                Method::PUT,
                "/v1/event-types/{topic}".to_owned(),
                "/v1/event-types/a.b",
                Some(("event_type.put", "a.b")),
            ),
            (
                Method::PUT,
                "/v1/catalogue/mode".to_owned(),
                "/v1/catalogue/mode",
                Some(("catalogue.mode", "")),
            ),
            (
                Method::POST,
                "/v1/consumers/{name}/pause".to_owned(),
                "/v1/consumers/w/pause",
                Some(("consumer.pause", "w")),
            ),
        ];
        for (m, template, path, want) in rows {
            let got = describe(&m, &template, path);
            assert_eq!(
                got.as_ref().map(|(_, a, t)| (a.as_str(), t.as_str())),
                want,
                "{template}"
            );
        }
    }
}
