//! The console's actions: a confirmation page (GET, changes nothing) and the form it posts
//! (with the session's CSRF token). Rotating a secret answers with a page that shows the new
//! secret this once; it is kept nowhere else.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use outboxkit_core::endpoint::{EndpointStatus, EndpointUpdate};
use outboxkit_core::tokens::TokenScope;
use outboxkit_core::TenantId;
use serde::Deserialize;

use super::{csrf_ok, error_page, page, User};
use crate::api::{delivery_id, endpoint_id};
use crate::html::{enc, esc};
use crate::problem::Problem;
use crate::state::Serve;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfirmQuery {
    #[allow(dead_code)]
    tenant: Option<String>,
    action: String,
    target: String,
}

fn describe(action: &str) -> Option<&'static str> {
    Some(match action {
        "replay" => "Replay this dead delivery with a fresh budget, due now",
        "retry" => "Make this delivery due now, keeping its attempts",
        "reset" => "Give this held delivery a fresh budget, due now",
        "cancel" => "Cancel this delivery before it is sent: it becomes dead (cancelled) and is never sent unless you replay it",
        "pause" => "Pause this endpoint: what is queued waits until it is resumed",
        "resume" => "Resume this endpoint: its waiting deliveries go out at once",
        "release-held" => "Release this endpoint's held deliveries",
        "rotate" => "Rotate this endpoint's signing secret: the old one keeps signing until you finish the rotation, and the new one is shown once, on the next page",
        "finish-rotation" => "Finish this endpoint's rotation: the previous secret stops signing, so receivers must verify with the new one",
        _ => return None,
    })
}

/// The message of a rotation refused because one is in progress.
const IN_PROGRESS: &str = "rotation in progress: finish it first, or rotate anyway (the oldest secret then stops signing at once, and receivers still verifying with it start failing)";

fn action_form(user: &User, action: &str, target: &str, force: bool, label: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/console/act\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <input type=\"hidden\" name=\"action\" value=\"{action}\">\
         <input type=\"hidden\" name=\"target\" value=\"{target}\">\
         <input type=\"hidden\" name=\"tenant\" value=\"{tenant}\">{force}\
         <button type=\"submit\" class=\"danger\" id=\"confirm{suffix}\">{label}</button></form>",
        csrf = esc(&user.session.csrf),
        action = esc(action),
        target = esc(target),
        tenant = esc(user.tenant.as_str()),
        force = if force {
            "<input type=\"hidden\" name=\"force\" value=\"1\">"
        } else {
            ""
        },
        suffix = if force { "-force" } else { "" },
        label = esc(label),
    )
}

pub(super) async fn confirm(
    State(s): State<Serve>,
    user: User,
    axum::extract::Query(q): axum::extract::Query<ConfirmQuery>,
) -> Response {
    let Some(what) = describe(&q.action) else {
        return error_page(&user, &Problem::bad_request("unknown action"));
    };
    if user.session.read_only {
        return error_page(&user, &Problem::forbidden("this token is read-only"));
    }
    let tq = enc(user.tenant.as_str());
    // "Cancel" would be ambiguous on the page that confirms a cancel.
    let back = if q.action == "cancel" {
        "Back"
    } else {
        "Cancel"
    };
    let cancel = format!("<a class=\"button secondary\" href=\"/console?tenant={tq}\">{back}</a>");
    // A rotation while one is in progress: offer to finish it, or to rotate anyway.
    let in_progress = if q.action == "rotate" {
        match endpoint_id(&q.target) {
            Ok(id) => s
                .inner
                .store
                .get_endpoint(&user.tenant, id)
                .await
                .is_ok_and(|e| e.previous_secret.is_some()),
            Err(_) => false,
        }
    } else {
        false
    };
    let body = if in_progress {
        format!(
            "<h1>Confirm</h1><div class=\"error\" id=\"in-progress\">A {IN_PROGRESS}.</div>\
             <p class=\"mono\">{target}</p><div class=\"actions\">{finish}{force}{cancel}</div>",
            target = esc(&q.target),
            finish = action_form(
                &user,
                "finish-rotation",
                &q.target,
                false,
                "Finish rotation"
            ),
            force = action_form(&user, "rotate", &q.target, true, "Rotate anyway"),
        )
    } else {
        format!(
            "<h1>Confirm</h1><p>{what}?</p><p class=\"mono\">{target}</p>\
             <div class=\"actions\">{form}{cancel}</div>",
            target = esc(&q.target),
            form = action_form(
                &user,
                &q.action,
                &q.target,
                false,
                if q.action == "cancel" {
                    "Cancel delivery"
                } else {
                    "Confirm"
                }
            ),
        )
    };
    page(Some((&user, "")), "Confirm", &body).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActForm {
    csrf: String,
    action: String,
    target: String,
    tenant: String,
    /// `1` to rotate although a rotation is in progress.
    #[serde(default)]
    force: Option<String>,
}

/// What an action did: where to go next, or a page to show (a new secret).
enum Done {
    To(String),
    Show(Response),
}

/// A state-changing form's checks: its CSRF token, a session that may write, and the
/// tenant it names (an admin token acts on that tenant, a tenant token only on its own,
/// which `user` is then about). `Some` is the refusal page to answer with.
pub(super) fn refused_change(user: &mut User, csrf: &str, tenant: &str) -> Option<Response> {
    if !csrf_ok(user, csrf) {
        return Some(error_page(
            user,
            &Problem::forbidden("the form has expired; reload the page"),
        ));
    }
    if user.session.read_only {
        return Some(error_page(
            user,
            &Problem::forbidden("this token is read-only"),
        ));
    }
    match (&user.session.scope, TenantId::new(tenant)) {
        (TokenScope::Admin, Ok(t)) => user.tenant = t,
        (TokenScope::Tenant(own), Ok(t)) if *own == t => {}
        _ => return Some(error_page(user, &Problem::not_found())),
    }
    None
}

pub(super) async fn act(
    State(s): State<Serve>,
    mut user: User,
    Form(f): Form<ActForm>,
) -> Response {
    if let Some(refused) = refused_change(&mut user, &f.csrf, &f.tenant) {
        return refused;
    }
    let done = run(&s, &user, &f).await;
    if done.is_ok() {
        let noun = match f.action.as_str() {
            "replay" | "retry" | "reset" | "cancel" => "delivery",
            _ => "endpoint",
        };
        s.inner
            .audit(crate::state::Audit {
                tenant: Some(user.tenant.clone()),
                actor: &user.actor,
                action: &format!("{noun}.{}", f.action),
                target: &f.target,
                detail: "from the console".to_owned(),
                source: user.ip,
            })
            .await;
    }
    match done {
        Ok(Done::To(to)) => Redirect::to(&to).into_response(),
        Ok(Done::Show(res)) => res,
        Err(p) => error_page(&user, &p),
    }
}

async fn run(s: &Serve, user: &User, f: &ActForm) -> Result<Done, Problem> {
    let t = &user.tenant;
    let inner = &s.inner;
    let op = inner.operator();
    let tq = enc(t.as_str());
    let flash = |what: &str| Done::To(format!("/console/endpoints?tenant={tq}&done={}", enc(what)));
    Ok(match f.action.as_str() {
        "replay" | "retry" | "reset" | "cancel" => {
            let id = delivery_id(&f.target)?;
            match f.action.as_str() {
                "replay" => op.replay(t, id).await?,
                "retry" => op.retry_now(t, id).await?,
                "cancel" => op.cancel(t, id).await?,
                _ => op.reset(t, id).await?,
            }
            Done::To(format!(
                "/console/deliveries/{id}?tenant={tq}&done={}",
                enc(&format!("{} done", f.action))
            ))
        }
        "pause" | "resume" => {
            let id = endpoint_id(&f.target)?;
            let status = if f.action == "pause" {
                EndpointStatus::Paused
            } else {
                EndpointStatus::Active
            };
            let update = EndpointUpdate {
                status: Some(status),
                ..EndpointUpdate::default()
            };
            inner.store.update_endpoint(t, id, &update).await?;
            flash(&format!("{} done", f.action))
        }
        "release-held" => {
            let id = endpoint_id(&f.target)?;
            inner.store.get_endpoint(t, id).await?;
            let n = op.release_held(t, id).await?;
            flash(&format!("{n} released"))
        }
        "rotate" => {
            let id = endpoint_id(&f.target)?;
            let admin = inner.admin().ok_or_else(vault_missing)?;
            let e = inner.store.get_endpoint(t, id).await?;
            if e.previous_secret.is_some() && f.force.as_deref() != Some("1") {
                return Err(
                    Problem::new(StatusCode::CONFLICT, "conflict", "Conflict").detail(IN_PROGRESS)
                );
            }
            let secret = admin.rotate_secret(t, id, None).await?;
            let body = format!(
                "<h1>Secret rotated</h1><p>The new signing secret of <span class=\"mono\">{id}</span>, \
                 shown this once (it is not kept anywhere you can read it again): give it to the receiver now.</p>\
                 <pre class=\"mono\" id=\"new-secret\">{}</pre>\
                 <p>Both secrets sign until you finish the rotation on the endpoints page.</p>\
                 <p><a class=\"button\" href=\"/console/endpoints?tenant={tq}\">Back to the endpoints</a></p>",
                esc(&secret.expose())
            );
            Done::Show(page(Some((user, "endpoints")), "Secret rotated", &body).into_response())
        }
        "finish-rotation" => {
            let id = endpoint_id(&f.target)?;
            let admin = inner.admin().ok_or_else(vault_missing)?;
            admin.drop_previous_secret(t, id).await?;
            flash("rotation finished")
        }
        _ => return Err(Problem::bad_request("unknown action")),
    })
}

fn vault_missing() -> Problem {
    Problem::unavailable(
        "endpoint secrets need a vault key: start the server with OUTBOX_VAULT_KEY",
    )
}
