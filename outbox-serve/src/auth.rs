//! Bearer-token authentication and scope checks.
//!
//! | request | answer |
//! | --- | --- |
//! | no `Authorization: Bearer …` header | 401 |
//! | a malformed, unknown, wrong or revoked token | 401 (the same body for each), counted as a failure |
//! | a failed attempt from an address past `failed_auth_limit` failures within the window (or from anywhere past `failed_auth_global_limit`) | 429 with `Retry-After` instead of 401, counted too |
//! | a valid token from such an address | accepted: the limiter slows guesses, never a valid token |
//! | no token at all from such an address | 429 (not counted) |
//! | a tenant token on another tenant's path (or a tenant name that is not valid) | 404, as for a tenant with nothing |
//! | a read-only token on a call that changes something (enqueueing included) | 403 |
//! | an enqueue-only token on any call but `POST …/messages` (and at the console's login) | 403 |

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use outboxkit_core::tokens::{ApiToken, PresentedToken};
use outboxkit_core::{ErrorKind, TenantId};

use crate::problem::Problem;
use crate::state::{Inner, Serve};

/// The client's address, when the server was started with connect info.
pub(crate) fn client_ip(parts: &Parts) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Check a presented token's text: the stored token when it is valid and not revoked.
pub(crate) async fn authenticate(
    inner: &Inner,
    ip: Option<IpAddr>,
    text: &str,
) -> Result<ApiToken, Problem> {
    // A valid token is always looked at and accepted; only failures are refused.
    let fail = || {
        let blocked = inner.blocked(ip);
        inner.failed(ip);
        match blocked {
            Some(wait) => Problem::too_many(wait),
            None => Problem::unauthorized(),
        }
    };
    let Ok(presented) = PresentedToken::parse(text) else {
        return Err(fail());
    };
    let stored = match inner.tokens.get_token(presented.id()).await {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(fail()),
        Err(e) => return Err(e.into()),
    };
    if !stored.verify(&presented) {
        return Err(fail());
    }
    Ok(stored)
}

/// Name the caller for the audit log, when the call is one it records.
fn name_actor(parts: &Parts, token: &ApiToken) {
    if let Some(slot) = parts.extensions.get::<crate::audit::ActorSlot>() {
        slot.set(crate::state::actor_of(token.id, &token.label));
    }
}

/// The token and the `{tenant}` of the path, when the token reaches that tenant.
async fn token_for_path(parts: &mut Parts, state: &Serve) -> Result<(ApiToken, TenantId), Problem> {
    let inner = &state.inner;
    let ip = client_ip(parts);
    let Some(text) = bearer(&parts.headers) else {
        return Err(match inner.blocked(ip) {
            Some(wait) => Problem::too_many(wait),
            None => Problem::unauthorized(),
        });
    };
    let token = authenticate(inner, ip, text).await?;
    name_actor(parts, &token);
    let Path(params) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
        .await
        .map_err(|_| Problem::not_found())?;
    let tenant = params
        .get("tenant")
        .and_then(|t| TenantId::new(t.as_str()).ok())
        .ok_or_else(Problem::not_found)?;
    if !token.scope.allows(&tenant) {
        return Err(Problem::not_found());
    }
    Ok((token, tenant))
}

/// A caller allowed on the `{tenant}` of the path, for the request's method: reads with any
/// token of the tenant (or an admin token) that may read, writes only with a full one.
#[derive(Clone, Debug)]
pub(crate) struct Scoped {
    /// The tenant of the path.
    pub tenant: TenantId,
}

impl FromRequestParts<Serve> for Scoped {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Serve) -> Result<Self, Problem> {
        let (token, tenant) = token_for_path(parts, state).await?;
        if !token.access.may_read() {
            return Err(Problem::forbidden("this token may only enqueue messages"));
        }
        let write = !matches!(parts.method, Method::GET | Method::HEAD);
        if write && !token.access.may_change() {
            return Err(Problem::forbidden("this token is read-only"));
        }
        Ok(Scoped { tenant })
    }
}

/// A caller allowed to enqueue into the `{tenant}` of the path: a full or an enqueue-only
/// token of the tenant (or an admin token), never a read-only one.
#[derive(Clone, Debug)]
pub(crate) struct Enqueuer {
    /// The tenant of the path.
    pub tenant: TenantId,
}

impl FromRequestParts<Serve> for Enqueuer {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Serve) -> Result<Self, Problem> {
        let (token, tenant) = token_for_path(parts, state).await?;
        if !token.access.may_enqueue() {
            return Err(Problem::forbidden("this token is read-only"));
        }
        Ok(Enqueuer { tenant })
    }
}

/// The token of a caller of a global route (not under `/v1/tenants/{tenant}`), authenticated
/// and checked for reading, and for changing when the method writes; with whether it writes.
async fn global_token(parts: &mut Parts, state: &Serve) -> Result<(ApiToken, bool), Problem> {
    let inner = &state.inner;
    let ip = client_ip(parts);
    let Some(text) = bearer(&parts.headers) else {
        return Err(match inner.blocked(ip) {
            Some(wait) => Problem::too_many(wait),
            None => Problem::unauthorized(),
        });
    };
    let token = authenticate(inner, ip, text).await?;
    name_actor(parts, &token);
    Ok((token, !matches!(parts.method, Method::GET | Method::HEAD)))
}

/// Reading and, for a write, changing: what every global route asks of its token.
fn may_read_and_change(token: &ApiToken, write: bool) -> Result<(), Problem> {
    if !token.access.may_read() {
        return Err(Problem::forbidden("this token may only enqueue messages"));
    }
    if write && !token.access.may_change() {
        return Err(Problem::forbidden("this token is read-only"));
    }
    Ok(())
}

/// A caller of the global routes (the event-type catalogue, `/v1/event-types`): reads with
/// any token that may read, writes only with a full admin token (the catalogue is the whole
/// outbox's, not a tenant's).
#[derive(Clone, Debug)]
pub(crate) struct Global;

impl FromRequestParts<Serve> for Global {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Serve) -> Result<Self, Problem> {
        let (token, write) = global_token(parts, state).await?;
        may_read_and_change(&token, write)?;
        if write && token.scope.tenant().is_some() {
            return Err(Problem::forbidden(
                "the event-type catalogue is global: changing it needs an admin token",
            ));
        }
        Ok(Global)
    }
}

/// A caller with an admin token (consumers are global, not a tenant's): any other token gets
/// the 404 a tenant token gets for another tenant's path, so nothing is leaked; reads need a
/// token that may read, writes a full one.
#[derive(Clone, Debug)]
pub(crate) struct Admin;

impl FromRequestParts<Serve> for Admin {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &Serve) -> Result<Self, Problem> {
        let (token, write) = global_token(parts, state).await?;
        if token.scope != outboxkit_core::TokenScope::Admin {
            return Err(Problem::not_found());
        }
        may_read_and_change(&token, write)?;
        Ok(Admin)
    }
}
