//! `outbox serve`: the admin API and the web console of `outboxkit-serve`.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Args;
use outboxkit_core::{AeadVault, DynSecretVault};
use outboxkit_serve::{BasePath, Serve, ServeConfig};

use crate::endpoints::{egress_policy, EgressArgs};
use crate::error::{CliError, CliResult};
use crate::store::{LocationArgs, VaultArgs};
use crate::tokens::token_store;

/// `serve`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox tokens create --store sqlite:./outbox.sqlite --tenant acme\n  outbox serve --store sqlite:./outbox.sqlite --listen 127.0.0.1:8080\n  # then open http://127.0.0.1:8080/console, or call the API:\n  curl -H \"authorization: Bearer $TOKEN\" http://127.0.0.1:8080/v1/tenants/acme/deliveries?status=dead"
)]
pub struct ServeArgs {
    #[command(flatten)]
    location: LocationArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where endpoints may point (checked on create, update and test).
    #[command(flatten)]
    egress: EgressArgs,
    /// Failed authentications allowed per client address per minute; past it, that
    /// address's failed attempts get 429 (a valid token is still accepted).
    #[arg(long, default_value_t = 10)]
    failed_auth_limit: u32,
    /// The most client connections served at once; past it a new connection gets 503 and
    /// is closed. Keep it under the process's open-file limit (`ulimit -n`) minus the
    /// store's pool.
    #[arg(long, default_value_t = 512)]
    max_client_connections: usize,
    /// How long a client may take to send a request's headers, counted from when the
    /// server starts waiting for the request: an idle keep-alive connection is closed after
    /// it too (`10s`, `500ms`, …).
    #[arg(long, default_value = "10s")]
    header_read_timeout: String,
    /// How long a request's body may take to arrive; past it the request gets 408.
    #[arg(long, default_value = "30s")]
    body_timeout: String,
    /// Mount the API and the console under this path prefix, for a proxy that forwards
    /// `/outbox/…` unchanged (`--base-path /outbox`: the console at `/outbox/console`, the
    /// API under `/outbox/v1`). Starts with `/`, no trailing `/`, no `..`.
    #[arg(long, default_value = "/")]
    base_path: String,
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested; finishing the requests in flight");
}

/// A duration flag that must not be zero.
fn positive(flag: &str, s: &str) -> CliResult<std::time::Duration> {
    let d = crate::util::parse_flag_duration(flag, s)?;
    if d.is_zero() {
        return Err(CliError::usage(format!(
            "invalid input: --{flag} must be more than 0"
        )));
    }
    Ok(d)
}

/// Remove audit entries older than [`outboxkit_core::AUDIT_RETENTION_DEFAULT`] (90 days),
/// at start and then every hour, 1,000 at a time.
fn purge_audit_hourly(env: &crate::store::Env) {
    let console = crate::audit::console_store(env);
    let clock = env.clock.clone();
    tokio::spawn(async move {
        loop {
            let before = clock
                .now()
                .saturating_sub(outboxkit_core::AUDIT_RETENTION_DEFAULT);
            loop {
                match console.purge_audit(before, 1_000).await {
                    Ok(1_000) => continue,
                    Ok(_) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not purge the audit log");
                        break;
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
    });
}

/// Run `outbox serve` until SIGINT/SIGTERM.
pub async fn run(a: ServeArgs) -> CliResult<()> {
    if a.failed_auth_limit == 0 {
        return Err(CliError::usage(
            "invalid input: --failed-auth-limit must be at least 1",
        ));
    }
    if a.max_client_connections == 0 {
        return Err(CliError::usage(
            "invalid input: --max-client-connections must be at least 1",
        ));
    }
    let header_read_timeout = positive("header-read-timeout", &a.header_read_timeout)?;
    let body_timeout = positive("body-timeout", &a.body_timeout)?;
    let base_path = BasePath::new(&a.base_path)
        .map_err(|e| CliError::usage(format!("invalid input: --base-path: {}", e.message())))?;
    let env = a.location.open().await?;
    let policy = egress_policy(a.egress);
    let transport = outboxkit_http::HttpTransport::new(policy.clone())?;
    let mut serve = Serve::new(
        env.store.clone(),
        token_store(&env),
        env.clock.clone(),
        env.entropy.clone(),
    )
    .with_console_store(crate::audit::console_store(&env))
    .with_url_policy(Arc::new(policy))
    .with_transport(Arc::new(transport))
    .with_config(ServeConfig {
        failed_auth_limit: a.failed_auth_limit,
        max_connections: a.max_client_connections,
        header_read_timeout,
        body_timeout,
        // A plain-http listener on loopback cannot keep a `Secure` cookie in every browser;
        // anywhere else the console must sit behind TLS.
        secure_cookies: !a.listen.ip().is_loopback(),
        base_path: base_path.clone(),
        ..ServeConfig::default()
    });
    match &a.vault.vault_key {
        Some(k) => {
            let vault: Arc<DynSecretVault> = Arc::new(AeadVault::from_hex(k, env.entropy.clone())?);
            serve = serve.with_vault(vault);
        }
        None => eprintln!(
            "note: no OUTBOX_VAULT_KEY: creating endpoints, rotating and testing them answer 503"
        ),
    }
    purge_audit_hourly(&env);
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on {}: {e}", a.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::failed(format!("cannot read the listening address: {e}")))?;
    eprintln!(
        "outbox serve: {} on http://{addr} (API under {}, console at {})",
        env.describe(),
        base_path.join("/v1"),
        base_path.join("/console")
    );
    outboxkit_serve::serve_with(
        listener,
        serve.router(),
        serve.config().clone(),
        shutdown_signal(),
    )
    .await
    .map_err(|e| CliError::failed(format!("the server failed: {e}")))
}
