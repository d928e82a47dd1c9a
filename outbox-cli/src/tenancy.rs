//! `outbox purge | stats | tenants list`: retention and counts, across tenants or scoped to
//! one (`--tenant`) or one endpoint (`stats --endpoint`).

use std::time::Duration;

use clap::{Args, Subcommand};
use outboxkit_core::{
    Clock, DeliveryStatus, EndpointId, PurgeReport, RetentionPolicy, Stats, TenantId,
};
use serde_json::{json, Value};

use crate::error::{CliError, CliResult};
use crate::store::StoreArgs;
use crate::util::{emit_json, parse_flag_duration, table};
use crate::{out, outln};

/// `purge`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox purge --store postgres://postgres@127.0.0.1/app --older-than 30d\n  outbox purge --store sqlite:./outbox.sqlite --older-than 30d --tenant-window acme=90d\n  outbox purge --store sqlite:./outbox.sqlite --older-than 7d --tenant acme --json",
    mut_arg("tenant", |a| a.help("Purge only this tenant (every tenant, in rotation, when not given)"))
)]
pub struct PurgeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Remove finished deliveries completed longer ago than this (e.g. 30d): the default
    /// window of every tenant.
    #[arg(long)]
    older_than: String,
    /// A tenant's own window, `TENANT=DURATION` (e.g. acme=90d); repeatable.
    #[arg(long = "tenant-window", value_name = "TENANT=DURATION")]
    tenant_window: Vec<String>,
    /// Rows per batch (1-10000).
    #[arg(long, default_value_t = 1000)]
    batch: u32,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// `stats`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox stats --store sqlite:./outbox.sqlite\n  outbox stats --store sqlite:./outbox.sqlite --tenant acme --json\n  outbox stats --store sqlite:./outbox.sqlite --tenant acme --endpoint 0193…",
    mut_arg("tenant", |a| a.help("Count only this tenant (every tenant when not given; with --endpoint, `default` when not given)"))
)]
pub struct StatsArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Count only this endpoint's deliveries (of the `--tenant`).
    #[arg(long)]
    endpoint: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// `tenants`.
#[derive(Debug, Subcommand)]
#[command(after_help = "Example:\n  outbox tenants list --store sqlite:./outbox.sqlite")]
pub enum TenantsCmd {
    /// Every tenant with deliveries or messages, with its counts.
    List(TenantsListArgs),
}

/// `tenants list`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox tenants list --store sqlite:./outbox.sqlite --json | jq '.tenants[].tenant'"
)]
pub struct TenantsListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// The retention policy of `purge`: `--older-than` plus the `--tenant-window` overrides.
fn policy(a: &PurgeArgs) -> CliResult<RetentionPolicy> {
    let mut p = RetentionPolicy::new(parse_flag_duration("older-than", &a.older_than)?);
    for w in &a.tenant_window {
        let (t, d) = w.split_once('=').ok_or_else(|| {
            CliError::usage("invalid input: --tenant-window: use TENANT=DURATION (e.g. acme=90d)")
        })?;
        let t = TenantId::new(t)
            .map_err(|e| CliError::usage(format!("invalid input: --tenant-window: {e}")))?;
        p = p.tenant(t, parse_flag_duration("tenant-window", d)?);
    }
    p.validate()?;
    Ok(p)
}

fn report_json(r: &PurgeReport, scope: Option<&TenantId>) -> Value {
    json!({
        "tenant": scope.map(TenantId::as_str),
        "deliveries": r.deliveries,
        "messages": r.messages,
    })
}

/// `purge`: one tenant (`--tenant`) with its window, or every tenant in rotation, each with
/// its own window, until nothing expired is left.
pub async fn purge(a: PurgeArgs) -> CliResult<()> {
    let policy = policy(&a)?;
    outboxkit_core::store::check_purge_limit(a.batch)?;
    let only = a.store.tenant_given().map(TenantId::new).transpose()?;
    let env = a.store.open().await?;
    let cutoffs = policy.cutoffs(env.clock.now());
    let mut total = PurgeReport::default();
    let spinner = crate::util::spinner(a.json, "purging");
    for _ in 0..1_000_000 {
        let r = match &only {
            Some(t) => {
                env.store
                    .purge_tenant(t, cutoffs.before(t), a.batch)
                    .await?
            }
            None => env.store.purge_expired(&cutoffs, a.batch).await?,
        };
        if r.tenant.is_none() || (r.deliveries == 0 && r.messages == 0) {
            break;
        }
        total.deliveries += r.deliveries;
        total.messages += r.messages;
    }
    spinner.finish_and_clear();
    if a.json {
        return emit_json(&report_json(&total, only.as_ref()));
    } else {
        let whose = only.map_or_else(|| "every tenant".to_owned(), |t| format!("tenant {t}"));
        outln!(
            "purged {} deliveries and {} messages of {whose}",
            total.deliveries,
            total.messages
        );
    }
    Ok(())
}

/// Stats as JSON: counts by status, the oldest due time (RFC 3339) and its age in ms.
fn stats_json(s: &Stats) -> Value {
    let mut v = serde_json::Map::new();
    for st in DeliveryStatus::ALL {
        v.insert(st.as_str().to_owned(), json!(s.count(st)));
    }
    v.insert("total".to_owned(), json!(s.total()));
    v.insert(
        "oldest_due_at".to_owned(),
        json!(s.oldest_due_at.map(|t| t.to_rfc3339())),
    );
    v.insert(
        "oldest_due_age_ms".to_owned(),
        json!(s.oldest_due_age.map(ms)),
    );
    Value::Object(v)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `stats`: every tenant, or one (`--tenant`), or one endpoint of it (`--endpoint`).
pub async fn stats(a: StatsArgs) -> CliResult<()> {
    let endpoint = a.endpoint.as_deref().map(EndpointId::parse).transpose()?;
    let only = a.store.tenant_given().map(TenantId::new).transpose()?;
    let env = a.store.open().await?;
    let s = match (&only, endpoint) {
        (None, None) => env.store.stats().await?,
        // An endpoint belongs to one tenant: `--endpoint` alone means the default tenant's,
        // like every other command without `--tenant`.
        (_, Some(_)) | (Some(_), None) => {
            if let Some(e) = endpoint {
                // Another tenant's endpoint is not found, as everywhere else.
                env.store.get_endpoint(&env.tenant, e).await?;
            }
            env.store.tenant_stats(&env.tenant, endpoint).await?
        }
    };
    if a.json {
        let mut v = stats_json(&s);
        if let Value::Object(m) = &mut v {
            let scoped = only.is_some() || endpoint.is_some();
            m.insert(
                "tenant".to_owned(),
                json!(scoped.then(|| env.tenant.as_str().to_owned())),
            );
            m.insert(
                "endpoint".to_owned(),
                json!(endpoint.map(|e| e.to_string())),
            );
        }
        return emit_json(&v);
    }
    for st in DeliveryStatus::ALL {
        outln!("{:<11} {}", st.as_str(), s.count(st));
    }
    match s.oldest_due_age {
        Some(age) => outln!("oldest due  {} ms ago", age.as_millis()),
        None => outln!("oldest due  -"),
    }
    Ok(())
}

/// `tenants list`.
pub async fn tenants(c: TenantsCmd) -> CliResult<()> {
    let TenantsCmd::List(a) = c;
    let env = a.store.open().await?;
    let list = env.store.tenants().await?;
    if a.json {
        let items: Vec<Value> = list
            .iter()
            .map(|t| {
                let mut v = stats_json(&t.stats);
                if let Value::Object(m) = &mut v {
                    m.insert("tenant".to_owned(), json!(t.tenant.as_str()));
                    m.insert("messages".to_owned(), json!(t.messages));
                }
                v
            })
            .collect();
        return emit_json(&json!({ "tenants": items }));
    }
    let mut header = vec!["TENANT", "MESSAGES"];
    header.extend(DeliveryStatus::ALL.iter().map(|s| s.as_str()));
    header.push("OLDEST DUE");
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|t| {
            let mut row = vec![t.tenant.to_string(), t.messages.to_string()];
            row.extend(
                DeliveryStatus::ALL
                    .iter()
                    .map(|s| t.stats.count(*s).to_string()),
            );
            row.push(
                t.stats
                    .oldest_due_at
                    .map_or_else(|| "-".to_owned(), |d| d.to_rfc3339()),
            );
            row
        })
        .collect();
    out!("{}", table(&header, &rows));
    Ok(())
}
