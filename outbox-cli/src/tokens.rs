//! `outbox tokens create|list|revoke`: the bearer tokens of `outbox serve`.

use std::sync::Arc;

use clap::{Args, Subcommand};
use outboxkit_core::tokens::{ApiToken, DynTokenStore, TokenAccess, TokenScope};
use outboxkit_core::{TenantId, TokenId};
use serde_json::json;

use crate::error::{CliError, CliResult};
use crate::store::{Backend, Env, LocationArgs};
use crate::util::{emit, emit_json, table};

/// `outbox tokens`.
#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// Issue a token for one tenant (or, with --admin, every tenant); prints it once.
    Create(CreateArgs),
    /// List tokens (never their secrets).
    List(ListArgs),
    /// Revoke a token: it stops working at once, console sessions included.
    Revoke(RevokeArgs),
}

/// `tokens create`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox tokens create --store sqlite:./outbox.sqlite --tenant acme --read-only --label support\n  outbox tokens create --store sqlite:./outbox.sqlite --tenant acme --enqueue-only --label orders-service\n  outbox tokens create --store postgres://postgres@127.0.0.1/app --admin --label ops"
)]
pub struct CreateArgs {
    #[command(flatten)]
    location: LocationArgs,
    /// The tenant the token reaches.
    #[arg(long, required_unless_present = "admin", conflicts_with = "admin")]
    tenant: Option<String>,
    /// Reach every tenant (an administrator's token).
    #[arg(long)]
    admin: bool,
    /// Only read: every call that changes something (enqueueing included) answers 403.
    #[arg(long, conflicts_with = "enqueue_only")]
    read_only: bool,
    /// Only enqueue messages (`POST /v1/tenants/{tenant}/messages`): every other call
    /// answers 403 and the console refuses it. For a service that produces events over HTTP.
    #[arg(long)]
    enqueue_only: bool,
    /// Who holds it (free text, at most 200 bytes).
    #[arg(long, default_value = "")]
    label: String,
    /// Print one JSON document instead of text (it holds the token, shown once).
    #[arg(long)]
    json: bool,
}

/// `tokens list`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  outbox tokens list --store sqlite:./outbox.sqlite")]
pub struct ListArgs {
    #[command(flatten)]
    location: LocationArgs,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// `tokens revoke`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  outbox tokens revoke --store sqlite:./outbox.sqlite 0193…")]
pub struct RevokeArgs {
    #[command(flatten)]
    location: LocationArgs,
    /// The token id (from `outbox tokens list`).
    id: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// The token store behind an open store.
pub fn token_store(env: &Env) -> Arc<DynTokenStore> {
    match &env.backend {
        Backend::Sqlite(s) => Arc::new(s.clone()),
        Backend::Postgres(s) => Arc::new(s.clone()),
        Backend::Redis(s) => Arc::new(s.clone()),
    }
}

fn view(t: &ApiToken) -> serde_json::Value {
    json!({
        "id": t.id.to_string(),
        "scope": match &t.scope { TokenScope::Admin => "admin".to_owned(), TokenScope::Tenant(x) => format!("tenant:{x}") },
        "tenant": t.scope.tenant().map(TenantId::to_string),
        "read_only": t.access == TokenAccess::ReadOnly,
        "access": t.access.as_str(),
        "label": t.label,
        "created_at": t.created_at.to_rfc3339(),
        "revoked_at": t.revoked_at.map(|r| r.to_rfc3339()),
    })
}

/// Run `outbox tokens …`.
pub async fn run(cmd: TokensCmd) -> CliResult<()> {
    match cmd {
        TokensCmd::Create(a) => {
            let scope = match (&a.tenant, a.admin) {
                (Some(t), false) => TokenScope::Tenant(TenantId::new(t.as_str())?),
                (None, true) => TokenScope::Admin,
                _ => return Err(CliError::usage("give --tenant T or --admin")),
            };
            let access = match (a.read_only, a.enqueue_only) {
                (false, false) => TokenAccess::Full,
                (true, false) => TokenAccess::ReadOnly,
                (false, true) => TokenAccess::EnqueueOnly,
                (true, true) => {
                    return Err(CliError::usage(
                        "give at most one of --read-only and --enqueue-only",
                    ))
                }
            };
            let env = a.location.open().await?;
            let (token, text) =
                ApiToken::issue(scope, access, &a.label, env.clock.now(), &*env.entropy)?;
            token_store(&env).create_token(&token).await?;
            if a.json {
                let mut v = view(&token);
                v["token"] = json!(text);
                emit_json(&v)
            } else {
                emit(&format!(
                    "{text}\n\ntoken {} ({}{}) created; it is shown only this once\n",
                    token.id,
                    token.scope,
                    match token.access {
                        TokenAccess::Full => "",
                        TokenAccess::ReadOnly => ", read-only",
                        TokenAccess::EnqueueOnly => ", enqueue-only",
                    }
                ))
            }
        }
        TokensCmd::List(a) => {
            let env = a.location.open().await?;
            let all = token_store(&env).list_tokens().await?;
            if a.json {
                return emit_json(&json!({ "tokens": all.iter().map(view).collect::<Vec<_>>() }));
            }
            let rows: Vec<Vec<String>> = all
                .iter()
                .map(|t| {
                    vec![
                        t.id.to_string(),
                        t.scope.to_string(),
                        t.access.as_str().to_owned(),
                        t.label.clone(),
                        t.created_at.to_rfc3339(),
                        t.revoked_at
                            .map_or_else(|| "—".to_owned(), |r| r.to_rfc3339()),
                    ]
                })
                .collect();
            emit(&table(
                &["id", "scope", "access", "label", "created", "revoked"],
                &rows,
            ))
        }
        TokensCmd::Revoke(a) => {
            let id = TokenId::parse(&a.id)?;
            let env = a.location.open().await?;
            let t = token_store(&env).revoke_token(id, env.clock.now()).await?;
            // Its console sessions end now (the server also refuses them at their next use).
            crate::audit::console_store(&env)
                .delete_token_sessions(id)
                .await?;
            crate::audit::record(&env, None, "token.revoke", &id.to_string(), String::new()).await;
            if a.json {
                emit_json(&view(&t))
            } else {
                emit(&format!("token {} revoked\n", t.id))
            }
        }
    }
}
