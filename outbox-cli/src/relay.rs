//! `outbox relay`: the dispatcher as a long-running sidecar (webhooks, e-mail and a broker).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use outboxkit_core::{MailErrorCode, RetryPolicy, TenantPolicy};
use outboxkit_dispatch::{DispatcherConfig, MetricsObserver, Observer};
use outboxkit_smtp::{SmtpConfig, SmtpMailer};

use crate::endpoints::{egress_policy, EgressArgs};
use crate::error::{CliError, CliResult};
use crate::store::{LocationArgs, VaultArgs};
use crate::util::{emit, emit_json, parse_flag_duration, MAX_DURATION};

/// `relay`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  OUTBOX_VAULT_KEY=… outbox relay --store postgres://postgres@127.0.0.1/app\n  OUTBOX_VAULT_KEY=… outbox relay --store 'postgres://app@db/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem' --metrics-addr 0.0.0.0:9090 --log-format json\n  outbox relay --store sqlite:./outbox.sqlite --until-idle --json   # cron or CI: deliver what is due, then exit\n  outbox relay --store postgres://… --broker nats://127.0.0.1:4222 --broker-topics 'order.*' --broker-subject 'events.{topic}'\n\nLogging: OUTBOX_LOG (else RUST_LOG) sets the filter, e.g. OUTBOX_LOG=info or OUTBOX_LOG=outboxkit_dispatch=debug (per-batch lines are DEBUG); --log-format json writes one JSON object per line. Sizing and probes: DEPLOYMENT.md."
)]
pub struct RelayArgs {
    #[command(flatten)]
    store: LocationArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// Deliver what is due now, then exit 0 (for cron and CI). A delivery held back by its
    /// endpoint's rate limit is work this run can do: the run waits for the limit's next
    /// token and delivers it before it exits. Deliveries that come due later for other
    /// reasons (a retry in a minute, a held delivery's next probe) wait for the next run.
    /// SIGINT/SIGTERM stop it early, like a normal run.
    #[arg(long)]
    until_idle: bool,
    /// Print the run's report as one JSON document (durations in milliseconds).
    #[arg(long)]
    json: bool,
    /// Deliveries per claim.
    #[arg(long, default_value_t = 100)]
    batch_size: u32,
    /// Deliveries at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Webhook requests in flight at once to any one endpoint (1–10000; default a quarter
    /// of --concurrency, at least 1), so one slow receiver cannot take every slot. A claim
    /// takes no more deliveries to an endpoint than this lets start.
    #[arg(long)]
    endpoint_concurrency: Option<usize>,
    /// The most PostgreSQL connections the relay opens (default 8). Claims, completion
    /// writes and endpoint reads share the pool; below 2 + concurrency/16 the relay warns
    /// that completions may starve, below 2 it refuses to start. The wake-up listener uses
    /// one more connection of its own. PostgreSQL only.
    #[arg(long, env = "OUTBOX_MAX_CONNECTIONS")]
    max_connections: Option<u32>,
    /// Serve /metrics (Prometheus), /healthz (alive) and /readyz (store reachable and
    /// migrated) on this address, e.g. 0.0.0.0:9090.
    #[arg(long, env = "OUTBOX_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Send each message's W3C traceparent header (set by the producer) with its webhook
    /// requests. Off by default: it tells receivers the producer's trace id.
    #[arg(long)]
    forward_traceparent: bool,
    /// Export a span per delivery attempt (its outcome, a child of the producer's stored
    /// traceparent) over OTLP/HTTP protobuf to this collector: its base URL, e.g.
    /// http://127.0.0.1:4318, to which /v1/traces is appended (a URL ending in /v1/traces is
    /// used as it is). Off when not given.
    #[arg(long, env = "OUTBOX_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// The service.name of the exported spans (with --otlp-endpoint).
    #[arg(long, env = "OUTBOX_OTLP_SERVICE_NAME", default_value = "outbox-relay")]
    otlp_service_name: String,
    /// How often to poll when no wake-up arrives.
    #[arg(long, default_value = "1s")]
    poll_interval: String,
    /// The webhook deadline over connect, headers and body.
    #[arg(long, default_value = "10s")]
    webhook_timeout: String,
    /// How much of each webhook (and mail API) response body the ledger keeps per attempt,
    /// in bytes (at most 65536, the transport's read cap; 0 keeps headers and timings only).
    #[arg(long, value_name = "BYTES", default_value_t = outboxkit_core::model::RESPONSE_BODY_CAP_DEFAULT)]
    response_body_cap: usize,
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
    /// The mail service deduplicates (the API by Idempotency-Key, an SMTP server by
    /// Message-ID): unknown outcomes may then be retried.
    #[arg(long)]
    mail_idempotent: bool,
    /// An SMTP server to send e-mail through instead of --mail-url:
    /// smtp://[user@]host[:port] (STARTTLS required, port 587), smtps://[user@]host[:port]
    /// (implicit TLS, port 465), or smtp://host:port?tls=none (clear text, no user). The
    /// password is read from OUTBOX_SMTP_PASSWORD, never from the URL.
    #[arg(long, env = "OUTBOX_SMTP_URL", conflicts_with = "mail_url")]
    smtp_url: Option<String>,
    /// The sender address (envelope and From header) for --smtp-url.
    #[arg(long, env = "OUTBOX_SMTP_FROM")]
    smtp_from: Option<String>,
    /// The installation prefix of mail idempotency keys (`<prefix>-<delivery id>`); give each
    /// app or environment sharing one mail account its own.
    #[arg(long, env = "OUTBOX_MAIL_KEY_PREFIX", default_value = "outbox")]
    mail_key_prefix: String,
    /// POST a summary of deliveries that went dead here (at most one every 5 minutes while
    /// the relay runs; what is gathered when it stops is sent before it exits).
    #[arg(long)]
    dead_letter_webhook: Option<String>,
    /// Sign the --dead-letter-webhook alerts with this secret (`whsec_…`, Standard Webhooks
    /// headers, as every webhook; `outbox endpoints add` prints one to reuse, or any
    /// `whsec_` + base64 of 24 to 64 random bytes). Unsigned without it.
    #[arg(long, env = "OUTBOX_ALERT_SECRET", hide_env_values = true)]
    alert_secret: Option<String>,
    #[command(flatten)]
    broker: Box<crate::broker::BrokerArgs>,
}

/// The `--alert-secret`, checked: it needs `--dead-letter-webhook` and must be a `whsec_`
/// secret (the message never repeats it).
fn alert_secret(
    webhook: bool,
    text: Option<&str>,
) -> CliResult<Option<outboxkit_core::WebhookSecret>> {
    let Some(text) = text else { return Ok(None) };
    if !webhook {
        return Err(CliError::usage(
            "--alert-secret (or OUTBOX_ALERT_SECRET) needs --dead-letter-webhook",
        ));
    }
    outboxkit_core::WebhookSecret::parse(text.trim())
        .map(Some)
        .map_err(|_| {
            CliError::usage(
                "invalid input: --alert-secret: use a whsec_ secret (whsec_ and the base64 of 24 to 64 bytes)",
            )
        })
}

/// The SMTP mailer of `--smtp-url`, checked once: refused credentials or TLS stop the
/// relay here; an unreachable server only warns (the relay retries while it runs).
async fn smtp_mailer(
    url: &str,
    from: Option<&str>,
    idempotent: bool,
    timeout: Duration,
) -> CliResult<SmtpMailer> {
    let from =
        from.ok_or_else(|| CliError::usage("--smtp-url needs --smtp-from (or OUTBOX_SMTP_FROM)"))?;
    let mut config = SmtpConfig::from_url(url, from)?;
    config.password = std::env::var("OUTBOX_SMTP_PASSWORD").ok();
    if config.username.is_some() && config.password.is_none() {
        return Err(CliError::usage(
            "--smtp-url names a user: set its password in OUTBOX_SMTP_PASSWORD",
        ));
    }
    config.idempotent = idempotent;
    config.timeout = timeout;
    let mailer = SmtpMailer::new(config)?;
    match mailer.check().await {
        Err(e) if e.code == MailErrorCode::ConfigurationRefused => Err(CliError::usage(format!(
            "the smtp server refused the configuration: {}",
            e.detail
        ))),
        Err(e) => {
            tracing::warn!(error = %e, "the smtp server is not reachable yet");
            Ok(mailer)
        }
        Ok(()) => Ok(mailer),
    }
}

/// The relay's transport: the HTTP transport, plus one WARN per refused URL when the egress
/// policy refuses an endpoint, naming the flag that would allow it. The WARN is logged inside
/// the dispatcher's `outbox.delivery` span, which carries the endpoint id. URLs are kept in
/// memory only to warn once; they are never logged.
#[derive(Debug)]
struct HintingTransport {
    inner: outboxkit_http::HttpTransport,
    egress: EgressArgs,
    warned: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl HintingTransport {
    /// WARN once per URL the egress policy refused, naming the flag that would allow it.
    fn hint(&self, url: &outboxkit_core::EndpointUrl, response: &outboxkit_core::WebhookResponse) {
        if let outboxkit_core::WebhookResponse::Failed { class, .. } = response {
            if let Some(hint) = crate::endpoints::egress_hint(*class, url, self.egress) {
                let first = self
                    .warned
                    .lock()
                    .map(|mut w| w.insert(url.as_str().to_owned()))
                    .unwrap_or(false);
                if first {
                    tracing::warn!(
                        "{hint}; the endpoint's deliveries are retried and will die unless the relay is restarted with that flag (said once per endpoint)"
                    );
                }
            }
        }
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl outboxkit_core::WebhookTransport for HintingTransport {
    async fn send(
        &self,
        request: outboxkit_core::SignedRequest,
    ) -> outboxkit_core::WebhookResponse {
        let url = request.url.clone();
        let response = self.inner.send(request).await;
        self.hint(&url, &response);
        response
    }

    async fn send_detailed(&self, request: outboxkit_core::SignedRequest) -> outboxkit_core::Sent {
        let url = request.url.clone();
        let sent = self.inner.send_detailed(request).await;
        self.hint(&url, &sent.response);
        sent
    }
}

/// Per-batch log lines at DEBUG, the metrics when `--metrics-addr` is given and a span per
/// attempt when `--otlp-endpoint` is.
#[derive(Debug)]
struct RelayObserver {
    metrics: Option<MetricsObserver>,
    spans: Option<crate::otel::SpanObserver>,
}

impl Observer for RelayObserver {
    fn on_batch(&self, size: usize) {
        tracing::debug!(size, "claimed a batch");
    }
    fn on_delivery(&self, event: &outboxkit_dispatch::DeliveryEvent<'_>) {
        if let Some(m) = &self.metrics {
            m.on_delivery(event);
        }
        if let Some(s) = &self.spans {
            s.record(event);
        }
    }
    fn on_dead(&self, event: &outboxkit_dispatch::DeadLetterEvent<'_>) {
        tracing::warn!(delivery_id = %event.delivery_id, kind = event.kind.as_str(), attempts = event.attempts, "a delivery went dead");
        if let Some(m) = &self.metrics {
            m.on_dead(event);
        }
    }
    fn on_claim(&self, event: &outboxkit_dispatch::ClaimEvent) {
        if let Some(m) = &self.metrics {
            m.on_claim(event);
        }
    }
    fn on_settle(&self, event: &outboxkit_dispatch::SettleEvent) {
        tracing::debug!(
            completed = event.completed,
            released = event.released,
            lease_lost = event.lease_lost,
            "wrote a batch back"
        );
        if let Some(m) = &self.metrics {
            m.on_settle(event);
        }
    }
    fn on_circuit(&self, event: &outboxkit_dispatch::CircuitEvent<'_>) {
        if let Some(m) = &self.metrics {
            m.on_circuit(event);
        }
    }
}

/// The smallest pool a relay should have with `concurrency` deliveries at once: two (claims
/// and completion writes run on the store's own pools of up to two connections each, sized
/// no larger than this one), and one more per 16 deliveries for endpoint reads, lease
/// extensions and handler follow-ups, which use this pool.
pub fn recommended_connections(concurrency: usize) -> u32 {
    u32::try_from(2 + concurrency.div_ceil(16)).unwrap_or(u32::MAX)
}

/// Check `--max-connections` against `--concurrency`: an error below 2, a warning below
/// [`recommended_connections`].
pub fn check_sizing(max_connections: u32, concurrency: usize) -> CliResult<Option<String>> {
    if max_connections < 2 {
        return Err(CliError::usage(
            "invalid input: --max-connections: must be at least 2 (claims and completion writes each get up to 2 connections of their own, no more than this)",
        ));
    }
    let want = recommended_connections(concurrency);
    Ok((max_connections < want).then(|| {
        format!(
            "--max-connections {max_connections} is below {want} for --concurrency {concurrency}: endpoint reads and lease extensions may wait for a connection (leases may expire); raise it or lower --concurrency"
        )
    }))
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
    let response_body_cap = outboxkit_core::model::check_response_body_cap(a.response_body_cap)
        .map_err(|_| {
            CliError::usage(format!(
                "invalid input: --response-body-cap: {} bytes is more than 65536 (64 KiB, the transport's read cap)",
                a.response_body_cap
            ))
        })?;
    let mut config = DispatcherConfig {
        batch_size: a.batch_size,
        concurrency: a.concurrency,
        poll_interval: parse_flag_duration("poll-interval", &a.poll_interval)?,
        webhook_timeout: parse_flag_duration("webhook-timeout", &a.webhook_timeout)?,
        shutdown_grace: parse_flag_duration("shutdown-grace", &a.shutdown_grace)?,
        mail_key_prefix: a.mail_key_prefix.clone(),
        forward_traceparent: a.forward_traceparent,
        endpoint_concurrency: a.endpoint_concurrency,
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
    let alert_url = a
        .dead_letter_webhook
        .as_deref()
        .map(outboxkit_core::EndpointUrl::parse)
        .transpose()?;
    let alert_secret = alert_secret(alert_url.is_some(), a.alert_secret.as_deref())?;
    let otlp_url = a
        .otlp_endpoint
        .as_deref()
        .map(crate::otel::traces_url)
        .transpose()?;
    let postgres =
        a.store.store.starts_with("postgres://") || a.store.store.starts_with("postgresql://");
    if a.max_connections.is_some() && !postgres {
        tracing::warn!("--max-connections applies to PostgreSQL only; ignored");
    }
    if postgres {
        let max = a.max_connections.unwrap_or(8);
        if let Some(warning) = check_sizing(max, a.concurrency)? {
            tracing::warn!("{warning}");
        }
    }
    let metrics = a
        .metrics_addr
        .as_deref()
        .map(|_| crate::metrics::install())
        .transpose()?;
    let mut env = a.store.open_sized(a.max_connections).await?;
    env.vault_key = a.vault.vault_key.clone();
    let broker = a.broker.start().await?;
    if let (Some(addr), Some(handle)) = (&a.metrics_addr, metrics) {
        let sink = broker
            .clone()
            .map(|b| crate::metrics::Sink::new(a.broker.name(), b));
        crate::metrics::serve(addr, handle, env.store.clone(), sink).await?;
    }
    let vault = crate::vault_check::relay_vault(&env).await?;
    let telemetry = otlp_url
        .map(|url| crate::otel::Telemetry::start(url, &a.otlp_service_name))
        .transpose()?;
    let transport = Arc::new(HintingTransport {
        inner: outboxkit_http::HttpTransport::with_config(
            egress_policy(a.egress),
            outboxkit_http::HttpTransportConfig {
                response_body_cap,
                ..outboxkit_http::HttpTransportConfig::default()
            },
        )?,
        egress: a.egress,
        warned: std::sync::Mutex::default(),
    });
    let webhook_timeout = config.webhook_timeout;
    let builder = outboxkit_dispatch::Dispatcher::builder(env.store.clone())
        .config(config)
        .clock(env.clock.clone())
        .entropy(env.entropy.clone())
        .webhooks(transport.clone(), vault)
        .webhook_policy(TenantPolicy::uniform(policy.clone()))
        .observer(Arc::new(RelayObserver {
            metrics: a.metrics_addr.is_some().then_some(MetricsObserver),
            spans: telemetry.as_ref().map(crate::otel::Telemetry::observer),
        }));
    let mut builder = a.broker.add_to(builder, broker.as_ref(), policy)?;
    if let Some(url) = a.mail_url {
        let key = a.mail_api_key.ok_or_else(|| {
            CliError::usage("--mail-url needs --mail-api-key (or OUTBOX_MAIL_API_KEY)")
        })?;
        let mailer = outboxkit_http::HttpMailer::new(outboxkit_http::HttpMailerConfig {
            url,
            api_key: key,
            idempotent: a.mail_idempotent,
            ..outboxkit_http::HttpMailerConfig::default()
        })?
        .with_response_body_cap(response_body_cap)?;
        builder = builder.mailer(Arc::new(mailer));
    }
    if let Some(url) = &a.smtp_url {
        let mailer = smtp_mailer(
            url,
            a.smtp_from.as_deref(),
            a.mail_idempotent,
            webhook_timeout,
        )
        .await?;
        builder = builder.mailer(Arc::new(mailer));
    }
    if let Some(url) = alert_url {
        builder = builder.dead_letter_alerts(outboxkit_dispatch::DeadLetterAlerts {
            webhook: Some(outboxkit_dispatch::AlertWebhook {
                url,
                transport,
                secret: alert_secret,
            }),
            ..outboxkit_dispatch::DeadLetterAlerts::default()
        });
    }
    let dispatcher = builder.build()?;
    tracing::info!(until_idle = a.until_idle, "outbox relay started");
    let report = async {
        if a.until_idle {
            tokio::select! {
                r = dispatcher.run_once(MAX_DURATION) => Ok(r?),
                () = shutdown_signal() => {
                    // Unfinished claims expire with their leases and are delivered again.
                    Err(CliError::failed("stopped before the relay was idle"))
                }
            }
        } else {
            Ok(dispatcher.run(shutdown_signal()).await?)
        }
    }
    .await;
    // The spans of the last attempts are sent before the relay exits, however it stops.
    drop(dispatcher);
    if let Some(t) = telemetry {
        t.shutdown().await;
    }
    let report = report?;
    if a.json {
        return emit_json(&report_json(&report));
    }
    emit(&format!("{report}\n"))
}

/// The run report as JSON: the counters, `run_time_ms`, per-topic counts, the first dead
/// ids, the end-of-run queue statistics, and `claims_per_delivery` (deliveries claimed ÷
/// deliveries that reached a verdict; 1.0 when none was claimed only to be handed back,
/// `null` when nothing reached a verdict).
fn report_json(r: &outboxkit_dispatch::Report) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "claims_per_delivery".into(),
            serde_json::json!(r.claims_per_delivery()),
        );
        o.remove("run_time");
        o.insert(
            "run_time_ms".into(),
            serde_json::json!(u64::try_from(r.run_time.as_millis()).unwrap_or(u64::MAX)),
        );
        o.insert(
            "stats".into(),
            r.stats
                .as_ref()
                .map_or(serde_json::Value::Null, crate::json::stats),
        );
    }
    v
}
