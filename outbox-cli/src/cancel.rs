//! `outbox cancel`: one delivery by id or every match of filters (through `bulk.rs`), or
//! `--message <id>`: every waiting delivery of one message, cancelled in one store step
//! (`OperatorStore::cancel_message`), the in-flight and finished ones counted as skipped.

use std::time::Duration;

use outboxkit_core::{Delivery, DeliveryFilter, DeliveryStatus, Message, MessageId};
use outboxkit_dispatch::Operator;
use serde_json::json;

use clap::Args;

use crate::bulk::{
    collect, parse_id, require_filter, run_bulk, single, single_only, Action, Filters,
};
use crate::deliveries::{row, HEADER};
use crate::error::{CliError, CliResult};
use crate::store::{Env, StoreArgs};
use crate::util::{emit_json, table};
use crate::{json, outln};

/// `cancel`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox cancel --store sqlite:./outbox.sqlite 0193a0c4-…\n  outbox cancel --store sqlite:./outbox.sqlite --message 0193a0c4-… --json\n  outbox cancel --store sqlite:./outbox.sqlite --endpoint 0193… --topic order.created --dry-run"
)]
pub struct CancelArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// One delivery id (instead of --message or filters).
    id: Option<String>,
    /// Cancel every pending or held delivery of this message (instead of an id or filters).
    #[arg(long)]
    message: Option<String>,
    /// Only `pending` or only `held` deliveries (default: both).
    #[arg(long)]
    status: Option<String>,
    #[command(flatten)]
    filters: Filters,
}

/// `cancel`: one delivery by id, every waiting delivery of `--message`, or every pending or
/// held delivery matching filters. A delivery in flight or finished is refused (exit 1) by
/// id and skipped in bulk.
pub async fn cancel(a: CancelArgs) -> CliResult<()> {
    let statuses = match a.status.as_deref() {
        None => vec![DeliveryStatus::Pending, DeliveryStatus::Held],
        Some(s) => match DeliveryStatus::parse(s)? {
            st @ (DeliveryStatus::Pending | DeliveryStatus::Held) => vec![st],
            _ => {
                return Err(CliError::usage(
                    "invalid input: --status: cancel acts on pending or held deliveries",
                ))
            }
        },
    };
    if a.message.is_some() {
        if a.id.is_some() || a.status.is_some() || a.filters.any() || a.filters.all {
            return Err(CliError::usage(
                "invalid input: give either --message or a delivery id or filters, not both",
            ));
        }
        return message(a).await;
    }
    if let Some(id) = &a.id {
        single_only(&a.filters, a.status.is_some())?;
        let id = parse_id(id)?;
        let env = a.store.open().await?;
        return single(Action::Cancel, &env, id, &a.filters).await;
    }
    let filter = a.filters.parse(crate::bulk::now())?;
    require_filter(&a.filters, a.status.is_some())?;
    let env = a.store.open().await?;
    let matched = collect(&env, &filter, &statuses, |_| true).await?;
    run_bulk(Action::Cancel, &env, matched, &a.filters).await
}

/// `cancel --message`.
async fn message(a: CancelArgs) -> CliResult<()> {
    let id = MessageId::parse(a.message.as_deref().unwrap_or_default())?;
    let env = a.store.open().await?;
    // Another tenant's message is not found (exit 1), as for every cross-tenant call.
    let m = env.store.get_message(&env.tenant, id).await?;
    let f = &a.filters;
    if f.dry_run {
        let before = deliveries_of(&env, &m).await?;
        let would = before
            .iter()
            .filter(|d| d.status.check_cancel().is_ok())
            .count();
        let skipped = before.len() - would;
        if f.json {
            return emit_json(&json!({
                "action": "cancel",
                "message": id.to_string(),
                "dry_run": true,
                "cancelled": 0,
                "would_cancel": would,
                "skipped": skipped,
                "deliveries": before.iter().map(json::delivery).collect::<Vec<_>>(),
            }));
        }
        print_rows(&before)?;
        outln!(
            "dry run: cancel would cancel {would} deliveries of message {id} and skip {skipped}; nothing changed"
        );
        return Ok(());
    }
    let report = Operator::new(env.store.clone(), env.clock.clone())
        .cancel_message(&env.tenant, id)
        .await?;
    if f.json {
        let after = deliveries_of(&env, &m).await?;
        return emit_json(&json!({
            "action": "cancel",
            "message": id.to_string(),
            "dry_run": false,
            "cancelled": report.cancelled,
            "would_cancel": 0,
            "skipped": report.skipped,
            "deliveries": after.iter().map(json::delivery).collect::<Vec<_>>(),
        }));
    }
    outln!(
        "cancelled {} deliveries of message {id}; skipped {} (in flight or finished)",
        report.cancelled,
        report.skipped
    );
    Ok(())
}

/// The message's deliveries: those created with it (a delivery's `created_at` is its
/// message's) that name it.
async fn deliveries_of(env: &Env, m: &Message) -> CliResult<Vec<Delivery>> {
    let filter = DeliveryFilter {
        since: Some(m.created_at),
        until: Some(m.created_at.saturating_add(Duration::from_millis(1))),
        ..DeliveryFilter::default()
    };
    collect(env, &filter, &DeliveryStatus::ALL, |d| d.message_id == m.id).await
}

fn print_rows(ds: &[Delivery]) -> CliResult<()> {
    let rows: Vec<Vec<String>> = ds.iter().map(row).collect();
    if !rows.is_empty() {
        crate::out!("{}", table(&HEADER, &rows));
    }
    Ok(())
}
