//! `/v1/tenants/{tenant}/endpoints…`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use outboxkit_core::endpoint::{BodyFormat, EndpointStatus, EndpointUpdate, EndpointUrl};
use outboxkit_core::endpoint_headers::check_inputs;
use outboxkit_core::ops::{EndpointAdmin, NewEndpoint};
use outboxkit_core::vault::{SecretContext, SecretVault};
use outboxkit_core::webhook_request::{
    open_headers, open_secrets, signed_request, with_custom_headers,
};
use outboxkit_core::SealedSecret;
use outboxkit_core::{
    DisabledReason, HeaderInput, HeaderNames, Message, MessageId, TenantId, Topic, TopicFilter,
    WebhookResponse,
};

use super::{endpoint_id, Body, OptBody};
use crate::auth::Scoped;
use crate::problem::{ApiResult, Problem};
use crate::state::Serve;
use crate::views::{
    Changed, EndpointList, EndpointPatch, EndpointView, EndpointWithSecret, NewEndpointBody,
    RotateBody, TestResult,
};

fn admin(s: &Serve) -> ApiResult<EndpointAdmin> {
    s.inner.admin().ok_or_else(|| {
        Problem::unavailable(
            "endpoint secrets need a vault key: start the server with OUTBOX_VAULT_KEY",
        )
    })
}

/// The vault of a server started without a key, for header changes that seal nothing:
/// it refuses every call.
#[derive(Debug)]
struct NoVault;

#[async_trait::async_trait]
impl SecretVault for NoVault {
    async fn seal(&self, _: &[u8], _: &SecretContext) -> outboxkit_core::Result<SealedSecret> {
        Err(outboxkit_core::Error::misconfigured(
            "vault",
            "no vault key",
        ))
    }
    async fn open(&self, _: &SealedSecret, _: &SecretContext) -> outboxkit_core::Result<Vec<u8>> {
        Err(outboxkit_core::Error::misconfigured(
            "vault",
            "no vault key",
        ))
    }
}

fn body_format(s: Option<&str>) -> ApiResult<Option<BodyFormat>> {
    s.map(|f| BodyFormat::parse(f).map_err(Problem::from))
        .transpose()
}

/// A tenant's endpoints, oldest first.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/endpoints", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant")),
    responses((status = 200, body = EndpointList), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn list(State(s): State<Serve>, scope: Scoped) -> ApiResult<Json<EndpointList>> {
    let all = s.inner.store.list_endpoints(&scope.tenant).await?;
    Ok(Json(EndpointList {
        endpoints: all.iter().map(EndpointView::from).collect(),
    }))
}

/// Create an endpoint; the answer holds its secret, shown this once.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body = NewEndpointBody,
    responses((status = 201, body = EndpointWithSecret), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 413, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn create(
    State(s): State<Serve>,
    scope: Scoped,
    Body(b): Body<NewEndpointBody>,
) -> ApiResult<(StatusCode, Json<EndpointWithSecret>)> {
    let new = NewEndpoint {
        url: b.url,
        description: b.description,
        filter: b.filter,
        body_format: body_format(b.body_format.as_deref())?.unwrap_or_default(),
        rate_limit: b.rate_limit,
        fifo: b.fifo,
        secret: b.secret,
        headers: b.headers.into_iter().map(Into::into).collect(),
    };
    let (e, secret) = admin(&s)?.create(&scope.tenant, new).await?;
    Ok((
        StatusCode::CREATED,
        Json(EndpointWithSecret {
            endpoint: EndpointView::from(&e),
            secret: secret.expose(),
        }),
    ))
}

/// One endpoint.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/endpoints/{id}", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = EndpointView), (status = 400, body = Problem), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn show(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<EndpointView>> {
    let e = s
        .inner
        .store
        .get_endpoint(&scope.tenant, endpoint_id(&id)?)
        .await?;
    Ok(Json(EndpointView::from(&e)))
}

/// Change an endpoint's URL, description, filter, body format, rate limit or custom headers.
#[utoipa::path(patch, path = "/v1/tenants/{tenant}/endpoints/{id}", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    request_body = EndpointPatch,
    responses((status = 200, body = EndpointView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn update(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
    Body(b): Body<EndpointPatch>,
) -> ApiResult<Json<EndpointView>> {
    let id = endpoint_id(&id)?;
    let replace: Option<Vec<HeaderInput>> =
        b.headers.map(|h| h.into_iter().map(Into::into).collect());
    let set: Vec<HeaderInput> = b.set_headers.into_iter().map(Into::into).collect();
    let mut update = EndpointUpdate {
        url: b.url.as_deref().map(EndpointUrl::parse).transpose()?,
        description: b.description,
        filter: b.filter.as_deref().map(TopicFilter::parse).transpose()?,
        body_format: body_format(b.body_format.as_deref())?,
        rate_limit: b.rate_limit.map(|r| (r > 0).then_some(r)),
        fifo: b.fifo,
        remove_headers: b.remove_headers,
        ..EndpointUpdate::default()
    };
    update.validate()?;
    outboxkit_core::endpoint::check_rate_limit(update.rate_limit.flatten())?;
    if replace.is_none() && set.is_empty() && update.remove_headers.is_empty() {
        if let Some(url) = &update.url {
            s.inner.urls.check(url).await?;
        }
        let e = s
            .inner
            .store
            .update_endpoint(&scope.tenant, id, &update)
            .await?;
        return Ok(Json(EndpointView::from(&e)));
    }
    // Headers: checked (all of them, before any is sealed) and sealed by the admin, which
    // also checks the change against the endpoint as it is.
    if let Some(r) = &replace {
        check_inputs(r, &HeaderNames::default())?;
    }
    check_inputs(&set, &HeaderNames::default())?;
    let admin = if replace.iter().flatten().chain(&set).any(|h| h.secret) {
        admin(&s)?
    } else {
        // Plain headers need no vault; the admin seals nothing with this one.
        EndpointAdmin::new(
            s.inner.store.clone(),
            s.inner
                .vault
                .clone()
                .unwrap_or_else(|| std::sync::Arc::new(NoVault)),
            s.inner.clock.clone(),
            s.inner.entropy.clone(),
        )
        .with_url_policy(s.inner.urls.clone())
    };
    if let Some(r) = &replace {
        update.headers = Some(admin.seal_headers(&scope.tenant, id, r).await?);
    }
    update.set_headers = admin.seal_headers(&scope.tenant, id, &set).await?;
    update.validate()?;
    let e = admin.update(&scope.tenant, id, update).await?;
    Ok(Json(EndpointView::from(&e)))
}

async fn set_status(
    s: &Serve,
    tenant: &TenantId,
    id: &str,
    status: EndpointStatus,
) -> ApiResult<Json<EndpointView>> {
    let update = EndpointUpdate {
        status: Some(status),
        ..EndpointUpdate::default()
    };
    let e = s
        .inner
        .store
        .update_endpoint(tenant, endpoint_id(id)?, &update)
        .await?;
    Ok(Json(EndpointView::from(&e)))
}

/// Pause: what is queued and published meanwhile waits (held) until it is resumed.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/pause", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = EndpointView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn pause(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<EndpointView>> {
    set_status(&s, &scope.tenant, &id, EndpointStatus::Paused).await
}

/// Resume a paused or disabled endpoint; its waiting deliveries go out at once.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/resume", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = EndpointView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn resume(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<EndpointView>> {
    set_status(&s, &scope.tenant, &id, EndpointStatus::Active).await
}

/// Rotate the signing secret (the old one keeps signing as the previous secret until
/// `finish-rotation`); releases held deliveries. The answer holds the new secret, shown this
/// once. While a rotation is in progress, 409 unless `force` (which drops the oldest secret).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/rotate-secret", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    request_body(content = Option<RotateBody>, description = "Optional (absent, empty or null): a secret to use, and `force`"),
    responses((status = 200, body = EndpointWithSecret), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 409, body = Problem), (status = 413, body = Problem),
        (status = 415, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn rotate(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
    OptBody(b): OptBody<Option<RotateBody>>,
) -> ApiResult<Json<EndpointWithSecret>> {
    let b = b.unwrap_or_default();
    let id = endpoint_id(&id)?;
    let admin = admin(&s)?;
    if let Some(given) = &b.secret {
        outboxkit_core::WebhookSecret::parse(given)?;
    }
    let e = s.inner.store.get_endpoint(&scope.tenant, id).await?;
    if e.previous_secret.is_some() && !b.force {
        return Err(Problem::new(StatusCode::CONFLICT, "conflict", "Conflict").detail(format!(
            "rotation in progress: finish it with POST /v1/tenants/{}/endpoints/{id}/finish-rotation, \
             or rotate anyway with {{\"force\": true}} (the oldest secret then stops signing, and \
             receivers still verifying with it start failing)",
            scope.tenant
        )));
    }
    let secret = admin
        .rotate_secret(&scope.tenant, id, b.secret.as_deref())
        .await?;
    let e = s.inner.store.get_endpoint(&scope.tenant, id).await?;
    Ok(Json(EndpointWithSecret {
        endpoint: EndpointView::from(&e),
        secret: secret.expose(),
    }))
}

/// End a rotation: the previous secret stops signing, only the current one does. Harmless
/// when no rotation is in progress.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/finish-rotation", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = EndpointView), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn finish_rotation(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<EndpointView>> {
    let id = endpoint_id(&id)?;
    let e = admin(&s)?.drop_previous_secret(&scope.tenant, id).await?;
    Ok(Json(EndpointView::from(&e)))
}

/// Delete an endpoint (its pending and waiting deliveries die as `endpoint-removed`).
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/endpoints/{id}", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 204), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn delete(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.inner
        .store
        .delete_endpoint(&scope.tenant, endpoint_id(&id)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Release the endpoint's held deliveries (after fixing its receiver).
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/release-held", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = Changed), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn release_held(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<Changed>> {
    let id = endpoint_id(&id)?;
    s.inner.store.get_endpoint(&scope.tenant, id).await?;
    let n = s.inner.operator().release_held(&scope.tenant, id).await?;
    Ok(Json(Changed { changed: n }))
}

/// Send one signed test event (`outbox.test`) to the endpoint now; nothing is stored.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/endpoints/{id}/test", tag = "endpoints",
    params(("tenant" = String, Path, description = "The tenant"), ("id" = String, Path, description = "The endpoint id")),
    responses((status = 200, body = TestResult), (status = 400, body = Problem), (status = 401, body = Problem),
        (status = 403, body = Problem), (status = 404, body = Problem), (status = 503, body = Problem)),
    security(("bearer" = [])))]
pub(crate) async fn test(
    State(s): State<Serve>,
    scope: Scoped,
    Path((_, id)): Path<(String, String)>,
) -> ApiResult<Json<TestResult>> {
    let id = endpoint_id(&id)?;
    let inner = &s.inner;
    let e = inner.store.get_endpoint(&scope.tenant, id).await?;
    let vault = inner.vault.as_ref().ok_or_else(|| {
        Problem::unavailable(
            "endpoint secrets need a vault key: start the server with OUTBOX_VAULT_KEY",
        )
    })?;
    let transport = inner
        .transport
        .as_ref()
        .ok_or_else(|| Problem::unavailable("this server sends no webhooks"))?;
    if let EndpointStatus::Disabled(DisabledReason::Gone) = e.status {
        tracing::info!(endpoint = %id, "testing an endpoint that answered 410 Gone");
    }
    let secrets = open_secrets(&**vault, &e).await?;
    let headers = open_headers(&**vault, &e).await?;
    let now = inner.now();
    let message = Message {
        id: MessageId::generate(now, &*inner.entropy),
        topic: Topic::new("outbox.test")?,
        payload: br#"{"test":true}"#.to_vec(),
        tenant: scope.tenant.clone(),
        ordering_key: None,
        idempotency_key: None,
        available_at: now,
        headers: Default::default(),
        cause: None,
        created_at: now,
    };
    let delivery = outboxkit_core::DeliveryId::generate(now, &*inner.entropy);
    let req = signed_request(
        &e,
        &secrets,
        &message,
        delivery,
        now,
        &Default::default(),
        Duration::from_secs(10),
    );
    let req = with_custom_headers(req, &headers);
    Ok(Json(match transport.send(req).await {
        WebhookResponse::Answered {
            status, excerpt, ..
        } => TestResult {
            answered: true,
            status_code: Some(status),
            excerpt: Some(excerpt),
            error_class: None,
        },
        WebhookResponse::Failed { class, .. } => TestResult {
            answered: false,
            status_code: None,
            excerpt: None,
            error_class: Some(class.as_str().to_owned()),
        },
    }))
}
