//! `outbox cancel --message <id>`: every waiting delivery of one message, cancelled in one
//! store step (`OperatorStore::cancel_message`); the in-flight and finished ones are
//! counted as skipped.

use std::time::Duration;

use outboxkit_core::{Delivery, DeliveryFilter, DeliveryStatus, Message, MessageId};
use outboxkit_dispatch::Operator;
use serde_json::json;

use crate::bulk::{collect, CancelArgs};
use crate::deliveries::{row, HEADER};
use crate::error::CliResult;
use crate::store::Env;
use crate::util::{emit_json, table};
use crate::{json, outln};

/// `cancel --message`.
pub async fn message(a: CancelArgs) -> CliResult<()> {
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
