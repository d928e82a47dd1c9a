//! `outbox demo`: the whole library in under a minute, on an embedded SQLite store.
//!
//! Events are enqueued inside the same SQLite transactions as the "orders" they describe;
//! a handler, two local webhook receivers and a mail stand-in receive them. The receivers
//! fail for a while (503s, then 401s until the secret is rotated, then a 410 on one
//! endpoint, which an operator then re-enables and replays), the mail service is down at
//! first, and a few events are poison. At the end: deliveries by status, the ledger of one
//! retried delivery, and the figures.
//!
//! The receivers and the mail stand-in are the demo's own (`demo/receivers.rs`): the shipped
//! binary links no test code.

pub(crate) mod events;
mod receivers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use outboxkit_core::{
    AeadVault, Clock, DeliveryFilter, DeliveryStatus, EndpointId, EndpointStatus, Jitter,
    MailErrorCode, MailOutcome, PageRequest, RetryPolicy, Store, SystemClock, TenantId,
    TenantPolicy,
};
use outboxkit_dispatch::Timer;
use outboxkit_dispatch::{
    DispatcherConfig, EndpointAdmin, HandlerOptions, HandlerResult, NewEndpoint,
};

use self::receivers::{Mailbox, Receiver};
use crate::deliveries::attempts_table;
use crate::error::{CliError, CliResult};
use crate::store::open_url;
use crate::util::table;
use crate::{out, outln};

/// `demo`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox demo\n  outbox demo --events 60 --quiet\n  outbox demo --json | jq .figures"
)]
pub struct DemoArgs {
    /// The store (default: a SQLite file in a temporary folder).
    #[arg(long)]
    store: Option<String>,
    /// How many events to enqueue.
    #[arg(long, default_value_t = 300)]
    events: u32,
    /// Shorten every retry delay and probe interval so the demo finishes in under a minute.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fast: bool,
    /// No progress bar (for scripts and tests).
    #[arg(long)]
    quiet: bool,
    /// Print the figures, the counts by status and the dispatcher's report as one JSON
    /// document instead of text (implies no progress bar).
    #[arg(long)]
    json: bool,
    /// Also publish every event to NATS JetStream when a server answers here (`none`: never).
    #[arg(long, default_value = "nats://127.0.0.1:4222")]
    broker: String,
}

/// The figures the demo ends with.
#[derive(Debug, Default)]
struct Figures {
    deliveries: u64,
    succeeded: u64,
    dead: u64,
    retried: u64,
    held_released: u64,
    replayed: u64,
    replayed_succeeded: u64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Run the demo.
pub async fn run(a: DemoArgs) -> CliResult<()> {
    if !(1..=100_000).contains(&a.events) {
        return Err(CliError::usage("--events must be from 1 to 100000"));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| CliError::failed(format!("cannot create a temporary folder: {e}")))?;
    let url = a
        .store
        .clone()
        .unwrap_or_else(|| format!("sqlite:{}", dir.path().join("demo.sqlite").display()));
    let clock: Arc<dyn Timer> = Arc::new(SystemClock);
    let env = open_url(&url, "outbox", "default", None, true).await?;
    let store = env.store.clone();
    let tenant = TenantId::new("acme")?;
    let say = |s: &str| {
        if !a.quiet && !a.json {
            eprintln!("{s}");
        }
    };
    say(&format!("outbox demo: store {}", env.describe()));

    // Two receivers and their endpoints.
    let shop = Receiver::start()
        .await
        .map_err(|e| CliError::failed(format!("receiver: {e}")))?;
    let crm = Receiver::start()
        .await
        .map_err(|e| CliError::failed(format!("receiver: {e}")))?;
    let mut key = [0u8; 32];
    outboxkit_core::Entropy::fill(&*env.entropy, &mut key);
    let vault = Arc::new(AeadVault::new(&key, env.entropy.clone())?);
    let admin = EndpointAdmin::new(
        store.clone(),
        vault.clone(),
        clock.clone(),
        env.entropy.clone(),
    )
    .with_url_policy(Arc::new(loopback_policy()));
    let (shop_ep, _) = admin
        .create(
            &tenant,
            NewEndpoint {
                url: shop.url(),
                description: "shop".into(),
                filter: "order.*".into(),
                ..Default::default()
            },
        )
        .await?;
    let (crm_ep, _) = admin
        .create(
            &tenant,
            NewEndpoint {
                url: crm.url(),
                description: "crm".into(),
                filter: "*".into(),
                ..Default::default()
            },
        )
        .await?;
    // The shop fails with 503 for a while, then rejects our signature (401) until we rotate.
    shop.script(std::iter::repeat_n(503, 40));
    shop.refuse(401);
    // The crm takes 30 deliveries, then answers 410 Gone: its endpoint gets disabled.
    let crm_quota = (a.events / 2).clamp(1, 30) as usize;
    crm.script(std::iter::repeat_n(200, crm_quota));
    crm.refuse(410);
    let mail = Arc::new(Mailbox::default());
    mail.refuse(MailErrorCode::Unavailable, MailOutcome::NotSent);

    let handled = Arc::new(AtomicU64::new(0));
    let fast = a.fast;
    let d = |fast_ms: u64, slow: Duration| if fast { ms(fast_ms) } else { slow };
    let config = DispatcherConfig {
        poll_interval: d(100, Duration::from_secs(1)),
        held_probe_interval: d(1000, Duration::from_secs(3600)),
        park_delay: d(500, Duration::from_secs(60)),
        webhook_timeout: Duration::from_secs(5),
        lease: Duration::from_secs(35),
        // The shop's 503s open its circuit; short cool-downs keep the demo short.
        breaker_cooldown: d(50, Duration::from_secs(5)),
        breaker_max_cooldown: d(100, Duration::from_secs(300)),
        ..DispatcherConfig::default()
    };
    let webhook_policy = if fast {
        RetryPolicy::schedule(vec![ms(100), ms(300), ms(1000), ms(2000), ms(4000)])?
    } else {
        RetryPolicy::webhook_default()
    };
    let handler_policy = if fast {
        RetryPolicy::exponential(ms(100), 2.0, ms(2000), 8)?.with_jitter(Jitter::Equal)
    } else {
        RetryPolicy::handler_default()
    };
    let h = handled.clone();
    let leg = crate::demo_broker::BrokerLeg::start(&a.broker, &*env.entropy, say).await;
    let mut dispatcher = outboxkit_dispatch::Dispatcher::builder(store.clone())
        .config(config)
        .clock(clock.clone())
        .entropy(env.entropy.clone())
        .handler_with(
            "audit-log",
            "*",
            move |ctx: outboxkit_dispatch::Context, m: outboxkit_core::Message| {
                let h = h.clone();
                async move {
                    let v = m.json().unwrap_or_default();
                    if v["poison"].as_bool() == Some(true) {
                        return HandlerResult::discard("poison event");
                    }
                    if v["n"].as_u64().is_some_and(|n| n % 10 == 0) && ctx.attempt() == 1 {
                        return HandlerResult::retry("the audit database is busy");
                    }
                    h.fetch_add(1, Ordering::Relaxed);
                    HandlerResult::Ok
                }
            },
            HandlerOptions {
                retry: handler_policy.clone(),
                ..HandlerOptions::default()
            },
        )
        .webhooks(
            Arc::new(outboxkit_http::HttpTransport::new(loopback_policy())?),
            vault,
        )
        .webhook_policy(TenantPolicy::uniform(webhook_policy))
        .mailer(mail.clone())
        .mail_policy(TenantPolicy::uniform(handler_policy));
    if let Some(leg) = &leg {
        dispatcher = dispatcher.broker("demo-broker", "*", leg.sink()?);
    }
    let dispatcher = dispatcher.build()?;
    dispatcher.register().await?;

    // Enqueue inside transactions, beside the business rows.
    say(&format!("enqueueing {} events in transactions…", a.events));
    let before = store.stats().await?;
    let total = env.enqueue_demo_events(a.events).await?;
    let shop_deliveries = list_all(
        &*store,
        &tenant,
        &DeliveryFilter {
            endpoint: Some(shop_ep.id),
            ..DeliveryFilter::default()
        },
    )
    .await?
    .len();
    let bar = if a.quiet || a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} finished  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = {
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move {
            dispatcher
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
        })
    };

    let mut figures = Figures {
        deliveries: total,
        ..Figures::default()
    };
    let mut replayed = Vec::new();
    let started = clock.now();
    let mut rotated = false;
    let mut crm_gone = false;
    let mut crm_fixed = false;
    let mut mail_healed = false;
    let deadline = started.saturating_add(if fast {
        Duration::from_secs(50)
    } else {
        Duration::from_secs(24 * 3600)
    });
    loop {
        tokio::time::sleep(ms(100)).await;
        let now = clock.now();
        let stats = store.stats().await?;
        bar.set_position(
            (stats.succeeded + stats.dead).saturating_sub(before.succeeded + before.dead),
        );
        let elapsed = now.duration_since(started);
        if !mail_healed && elapsed > ms(1500) {
            mail.heal();
            mail_healed = true;
            bar.set_message("the mail service is back");
        }
        if !crm_gone && crm.count() > crm_quota {
            crm_gone = true;
            bar.set_message("crm answered 410 Gone: its endpoint is disabled");
        }
        if !rotated && shop.count() >= 40.min(shop_deliveries) {
            let held = count(&*store, &tenant, shop_ep.id, DeliveryStatus::Held).await?;
            if held >= 10 || elapsed > ms(12_000) {
                bar.set_message(format!(
                    "{held} shop deliveries held on 401: rotating the secret"
                ));
                admin.rotate_secret(&tenant, shop_ep.id, None).await?;
                shop.heal();
                figures.held_released = held;
                rotated = true;
            }
        }
        if crm_gone && !crm_fixed {
            let e = store.get_endpoint(&tenant, crm_ep.id).await?;
            // Wait for the deliveries in flight only: pending ones behind a held delivery
            // with the same ordering key stay pending until the endpoint is back (per-key
            // FIFO), so waiting for them too would wait for ever.
            let busy = count(&*store, &tenant, crm_ep.id, DeliveryStatus::Processing).await?;
            if matches!(e.status, EndpointStatus::Disabled(_)) && busy == 0 {
                bar.set_message(
                    "crm fixed: re-enabling the endpoint and replaying its dead letters",
                );
                crm.heal();
                admin
                    .set_status(&tenant, crm_ep.id, EndpointStatus::Active)
                    .await?;
                for id in ids(&*store, &tenant, crm_ep.id, DeliveryStatus::Dead).await? {
                    store.replay(&tenant, id).await?;
                    replayed.push(id);
                }
                crm_fixed = true;
            }
        }
        let unfinished = stats.pending + stats.processing + stats.sending + stats.held;
        if rotated && crm_fixed && unfinished == 0 {
            break;
        }
        if now > deadline {
            bar.abandon();
            let _ = stop_tx.send(());
            return Err(CliError::failed(format!(
                "the demo did not settle in time: {unfinished} deliveries unfinished"
            )));
        }
    }
    bar.finish_with_message("all deliveries settled");
    let _ = stop_tx.send(());
    let report = runner
        .await
        .map_err(|e| CliError::failed(format!("the dispatcher task failed: {e}")))??;

    // The ledger.
    let all = list_all(&*store, &tenant, &DeliveryFilter::default()).await?;
    let stats = store.stats().await?;
    figures.succeeded = stats.succeeded - before.succeeded;
    figures.dead = stats.dead - before.dead;
    figures.retried = all.iter().filter(|d| d.attempts > 1).count() as u64;
    figures.replayed = replayed.len() as u64;
    figures.replayed_succeeded = all
        .iter()
        .filter(|d| replayed.contains(&d.id) && d.status == DeliveryStatus::Succeeded)
        .count() as u64;

    let broker = match leg {
        Some(leg) => Some((leg.stream().to_owned(), leg.finish().await)),
        None => None,
    };
    if a.json {
        let figures_ok = figures.succeeded + figures.dead == figures.deliveries;
        crate::util::emit_json(&serde_json::json!({
            "figures": {
                "deliveries": figures.deliveries,
                "succeeded": figures.succeeded,
                "dead": figures.dead,
                "retried": figures.retried,
                "held_released": figures.held_released,
                "replayed": figures.replayed,
                "replayed_succeeded": figures.replayed_succeeded,
            },
            "stats": crate::json::stats(&stats),
            "handler_calls_succeeded": handled.load(Ordering::Relaxed),
            "emails_accepted": mail.accepted(),
            "broker_messages": broker.as_ref().map(|b| b.1),
            "warnings": crate::logging::warnings_held(),
        }))?;
        if !figures_ok {
            return Err(CliError::failed(
                "the figures do not add up: some deliveries are unfinished",
            ));
        }
        return Ok(());
    }
    outln!("\ndeliveries by status");
    let rows: Vec<Vec<String>> = DeliveryStatus::ALL
        .iter()
        .map(|s| vec![s.as_str().to_owned(), stats.count(*s).to_string()])
        .collect();
    out!("{}", table(&["status", "count"], &rows));
    if let Some(d) = all
        .iter()
        .filter(|d| d.destination.endpoint() == Some(shop_ep.id))
        .max_by_key(|d| d.attempts)
    {
        outln!(
            "\nthe attempts of one retried delivery ({}, to the shop)",
            d.id
        );
        out!("{}", attempts_table(&store.attempts(&tenant, d.id).await?));
    }
    outln!("\ndispatcher: {report}");
    outln!(
        "handler calls that succeeded: {}; e-mails accepted: {}",
        handled.load(Ordering::Relaxed),
        mail.accepted()
    );
    if let Some((stream, n)) = &broker {
        outln!("messages acknowledged by NATS JetStream (stream {stream}): {n}");
    }
    outln!(
        "warnings logged while it ran: {} (counted, not printed: the failing receiver is part of the story; OUTBOX_LOG=warn prints them)",
        crate::logging::warnings_held()
    );
    outln!(
        "\nfigures: deliveries={} succeeded={} dead={} retried={} held_released={} replayed={} replayed_succeeded={}",
        figures.deliveries, figures.succeeded, figures.dead, figures.retried, figures.held_released, figures.replayed,
        figures.replayed_succeeded
    );
    if figures.succeeded + figures.dead != figures.deliveries {
        return Err(CliError::failed(
            "the figures do not add up: some deliveries are unfinished",
        ));
    }
    Ok(())
}

fn loopback_policy() -> outboxkit_http::EgressPolicy {
    outboxkit_http::EgressPolicy::default()
        .allow_http(true)
        .allow_private(true)
}

async fn ids(
    store: &dyn Store,
    tenant: &TenantId,
    endpoint: EndpointId,
    status: DeliveryStatus,
) -> CliResult<Vec<outboxkit_core::DeliveryId>> {
    let f = DeliveryFilter {
        endpoint: Some(endpoint),
        status: Some(status),
        ..DeliveryFilter::default()
    };
    Ok(list_all(store, tenant, &f)
        .await?
        .into_iter()
        .map(|d| d.id)
        .collect())
}

async fn count(
    store: &dyn Store,
    tenant: &TenantId,
    endpoint: EndpointId,
    status: DeliveryStatus,
) -> CliResult<u64> {
    Ok(ids(store, tenant, endpoint, status).await?.len() as u64)
}

async fn list_all(
    store: &dyn Store,
    tenant: &TenantId,
    filter: &DeliveryFilter,
) -> CliResult<Vec<outboxkit_core::Delivery>> {
    let mut out = Vec::new();
    let mut page = PageRequest::first(1000);
    loop {
        let p = store.list_deliveries(tenant, filter, page).await?;
        out.extend(p.items);
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => return Ok(out),
        }
    }
}
