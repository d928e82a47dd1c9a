//! `outbox relay`: the dispatcher as a long-running sidecar (webhooks and e-mail).

use std::sync::Arc;

use clap::Args;
use outboxkit_core::{DispatcherConfig, Observer, RetryPolicy, TenantPolicy};

use crate::endpoints::{egress_policy, EgressArgs};
use crate::error::{CliError, CliResult};
use crate::store::{vault_from, StoreArgs};
use crate::util::parse_flag_duration;

/// `relay`.
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Deliveries per claim.
    #[arg(long, default_value_t = 100)]
    batch_size: u32,
    /// Deliveries at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// How often to poll when no wake-up arrives.
    #[arg(long, default_value = "1s")]
    poll_interval: String,
    /// The webhook deadline over connect, headers and body.
    #[arg(long, default_value = "10s")]
    webhook_timeout: String,
    /// How long a claim is held before another worker may take the delivery (default: the
    /// webhook timeout plus 30 s). Must exceed the webhook timeout.
    #[arg(long)]
    lease: Option<String>,
    /// How long to let in-flight deliveries finish on SIGINT/SIGTERM.
    #[arg(long, default_value = "10s")]
    shutdown_grace: String,
    /// The webhook retry schedule, comma-separated (default 1m,5m,30m,2h,12h).
    #[arg(long)]
    retry_schedule: Option<String>,
    /// How often held deliveries are probed (default 1h).
    #[arg(long)]
    held_probe_interval: Option<String>,
    #[command(flatten)]
    egress: EgressArgs,
    /// A JSON mail API to send e-mail through (POST {to, subject, text, html, ...}).
    #[arg(long, env = "OUTBOX_MAIL_URL")]
    mail_url: Option<String>,
    /// The mail API's bearer key.
    #[arg(long, env = "OUTBOX_MAIL_API_KEY", hide_env_values = true)]
    mail_api_key: Option<String>,
    /// The mail API deduplicates by Idempotency-Key (unknown outcomes may then be retried).
    #[arg(long)]
    mail_idempotent: bool,
    /// The installation prefix of mail idempotency keys (`<prefix>-<delivery id>`); give each
    /// app or environment sharing one mail account its own.
    #[arg(long, env = "OUTBOX_MAIL_KEY_PREFIX", default_value = "outbox")]
    mail_key_prefix: String,
    /// POST a summary of deliveries that went dead here (at most one every 5 minutes).
    #[arg(long)]
    dead_letter_webhook: Option<String>,
}

#[derive(Debug)]
struct BatchLog;

impl Observer for BatchLog {
    fn on_batch(&self, size: usize) {
        tracing::info!(size, "claimed a batch");
    }
}

/// Parse a comma-separated schedule.
pub fn schedule(s: &str) -> CliResult<RetryPolicy> {
    let steps = s
        .split(',')
        .map(|d| parse_flag_duration("retry-schedule", d))
        .collect::<CliResult<Vec<_>>>()?;
    Ok(RetryPolicy::schedule(steps)?)
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
    tracing::info!("shutdown requested; finishing in-flight deliveries");
}

/// Run the relay until SIGINT/SIGTERM.
pub async fn run(a: RelayArgs) -> CliResult<()> {
    let mut config = DispatcherConfig {
        batch_size: a.batch_size,
        concurrency: a.concurrency,
        poll_interval: parse_flag_duration("poll-interval", &a.poll_interval)?,
        webhook_timeout: parse_flag_duration("webhook-timeout", &a.webhook_timeout)?,
        shutdown_grace: parse_flag_duration("shutdown-grace", &a.shutdown_grace)?,
        mail_key_prefix: a.mail_key_prefix.clone(),
        ..DispatcherConfig::default()
    };
    config.lease = match &a.lease {
        Some(l) => parse_flag_duration("lease", l)?,
        None => config.webhook_timeout + std::time::Duration::from_secs(30),
    };
    if let Some(h) = &a.held_probe_interval {
        config.held_probe_interval = parse_flag_duration("held-probe-interval", h)?;
    }
    let policy = match &a.retry_schedule {
        Some(s) => schedule(s)?,
        None => RetryPolicy::webhook_default(),
    };
    let env = a.store.open().await?;
    let vault = vault_from(&env)?;
    let transport = outboxkit_http::HttpTransport::new(egress_policy(a.egress))?;
    let alert_url = a
        .dead_letter_webhook
        .as_deref()
        .map(outboxkit_core::EndpointUrl::parse)
        .transpose()?;
    let transport = Arc::new(transport);
    let mut builder = outboxkit_core::Dispatcher::builder(env.store.clone())
        .config(config)
        .clock(env.clock.clone())
        .entropy(env.entropy.clone())
        .webhooks(transport.clone(), vault)
        .webhook_policy(TenantPolicy::uniform(policy))
        .observer(Arc::new(BatchLog));
    if let Some(url) = a.mail_url {
        let key = a.mail_api_key.ok_or_else(|| {
            CliError::usage("--mail-url needs --mail-api-key (or OUTBOX_MAIL_API_KEY)")
        })?;
        let mailer = outboxkit_http::HttpMailer::new(outboxkit_http::HttpMailerConfig {
            url,
            api_key: key,
            idempotent: a.mail_idempotent,
            ..outboxkit_http::HttpMailerConfig::default()
        })?;
        builder = builder.mailer(Arc::new(mailer));
    }
    if let Some(url) = alert_url {
        builder = builder.dead_letter_alerts(outboxkit_core::DeadLetterAlerts {
            webhook: Some(outboxkit_core::AlertWebhook {
                url,
                transport,
                secret: None,
            }),
            ..outboxkit_core::DeadLetterAlerts::default()
        });
    }
    let dispatcher = builder.build()?;
    tracing::info!("outbox relay started");
    let report = dispatcher.run(shutdown_signal()).await?;
    println!("{report}");
    Ok(())
}
