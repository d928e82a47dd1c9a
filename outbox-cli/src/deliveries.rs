//! `outbox deliveries list|show`.

use clap::{Args, Subcommand};
use outboxkit_core::{
    Cursor, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointId, PageRequest, Topic,
};

use crate::attempt_view;
use crate::error::CliResult;
use crate::store::StoreArgs;
use crate::util::{emit_json, parse_flag_duration, table};
use crate::{json, out, outln};

/// `outbox deliveries`.
#[derive(Debug, Subcommand)]
pub enum DeliveriesCmd {
    /// List a tenant's deliveries, newest first.
    List(ListArgs),
    /// Show one delivery, its payload and its attempt ledger: per attempt the request
    /// headers as sent, the response's headers and body (within the relay's
    /// --response-body-cap), the timings and the address.
    Show(ShowArgs),
}

/// `deliveries list`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox deliveries list --store sqlite:./outbox.sqlite --status dead --since 24h\n  outbox deliveries list --store sqlite:./outbox.sqlite --json | jq -r '.deliveries[].id'"
)]
pub struct ListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// pending, processing, sending, succeeded, held or dead.
    #[arg(long)]
    status: Option<String>,
    /// Only deliveries to this endpoint.
    #[arg(long)]
    endpoint: Option<String>,
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Only deliveries of messages with this ordering key (the subject, e.g. order:42).
    #[arg(long)]
    ordering_key: Option<String>,
    /// Only deliveries with a stored response excerpt containing this text (any attempt;
    /// ASCII case ignored).
    #[arg(long)]
    text: Option<String>,
    /// Only deliveries created within this long (e.g. 1h, 7d).
    #[arg(long)]
    since: Option<String>,
    /// At most this many (1-1000).
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Continue after this cursor (printed at the end of a page).
    #[arg(long)]
    cursor: Option<String>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// `deliveries show`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox deliveries show --store sqlite:./outbox.sqlite 0193a0c4-…"
)]
pub struct ShowArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The delivery id.
    id: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// One delivery as a table row.
pub fn row(d: &Delivery) -> Vec<String> {
    let last = d
        .last_outcome
        .as_ref()
        .map_or(String::new(), |l| match l.status_code {
            Some(s) => format!("{} {s}", l.outcome.as_str()),
            None => l.outcome.as_str().to_owned(),
        });
    vec![
        d.id.to_string(),
        d.status.as_str().to_owned(),
        d.topic.to_string(),
        format!("{}:{}", d.destination.kind().as_str(), short_target(d)),
        d.attempts.to_string(),
        last,
        d.dead_reason
            .map_or(String::new(), |r| r.as_str().to_owned()),
    ]
}

fn short_target(d: &Delivery) -> String {
    match &d.destination {
        outboxkit_core::Destination::Email(_) => "(recipient)".to_owned(),
        other => other.target(),
    }
}

/// The header of [`row`].
pub const HEADER: [&str; 7] = [
    "id",
    "status",
    "topic",
    "destination",
    "attempts",
    "last",
    "dead",
];

/// Run a `deliveries` command.
pub async fn run(cmd: DeliveriesCmd) -> CliResult<()> {
    match cmd {
        DeliveriesCmd::List(a) => {
            let mut filter = DeliveryFilter {
                status: a.status.as_deref().map(DeliveryStatus::parse).transpose()?,
                endpoint: a.endpoint.as_deref().map(EndpointId::parse).transpose()?,
                topic: a.topic.as_deref().map(Topic::new).transpose()?,
                ordering_key: a
                    .ordering_key
                    .as_deref()
                    .map(outboxkit_core::OrderingKey::new)
                    .transpose()?,
                text: a.text.clone(),
                ..DeliveryFilter::default()
            };
            filter.validate()?;
            let since = a
                .since
                .as_deref()
                .map(|d| parse_flag_duration("since", d))
                .transpose()?;
            let page = PageRequest {
                limit: a.limit,
                cursor: a.cursor.as_deref().map(Cursor::decode).transpose()?,
            };
            page.validate()?;
            let env = a.store.open().await?;
            if let Some(d) = since {
                filter.since = Some(env.clock.now().saturating_sub(d));
            }
            let page = env
                .store
                .list_deliveries(&env.tenant, &filter, page)
                .await?;
            if a.json {
                emit_json(&serde_json::json!({
                    "deliveries": page.items.iter().map(json::delivery).collect::<Vec<_>>(),
                    "next_cursor": page.next.map(|c| c.encode()),
                }))?;
            } else {
                let rows: Vec<Vec<String>> = page.items.iter().map(row).collect();
                out!("{}", table(&HEADER, &rows));
                if let Some(c) = page.next {
                    outln!("more: --cursor {}", c.encode());
                }
            }
        }
        DeliveriesCmd::Show(a) => {
            let id = DeliveryId::parse(&a.id)?;
            let env = a.store.open().await?;
            let d = env.store.get_delivery(&env.tenant, id).await?;
            let attempts = env.store.attempts(&env.tenant, id).await?;
            let message = env.store.get_message(&env.tenant, d.message_id).await?;
            if a.json {
                return emit_json(&serde_json::json!({
                    "delivery": json::delivery(&d),
                    "payload": attempt_view::payload_json(&message),
                    "attempts": attempts.iter().map(json::attempt).collect::<Vec<_>>(),
                }));
            }
            out!("{}", table(&HEADER, &[row(&d)]));
            outln!(
                "\nrun: {}   next attempt: {}   created: {}   completed: {}",
                d.run,
                d.next_attempt_at,
                d.created_at,
                d.completed_at.map_or("-".to_owned(), |t| t.to_string())
            );
            outln!("\nattempts:");
            out!("{}", attempts_table(&attempts));
            out!("{}", attempt_view::payload_text(&message));
            for attempt in &attempts {
                out!("{}", attempt_view::attempt_text(attempt));
            }
        }
    }
    Ok(())
}

/// The attempt ledger as a table.
pub fn attempts_table(attempts: &[outboxkit_core::Attempt]) -> String {
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            vec![
                a.number.to_string(),
                a.run.to_string(),
                a.scheduled_at
                    .map_or_else(|| "-".to_owned(), |t| t.to_string()),
                a.record.started_at.to_string(),
                format!("{} ms", a.duration().as_millis()),
                a.record.outcome.as_str().to_owned(),
                a.record
                    .status_code
                    .map_or(String::new(), |s| s.to_string()),
                if a.probe { "yes" } else { "no" }.to_owned(),
                attempt_view::escape(a.record.excerpt.as_deref().unwrap_or_default(), false),
                format!(
                    "{} B sha256:{}",
                    a.payload.size,
                    a.payload.sha256.get(..12).unwrap_or(&a.payload.sha256)
                ),
            ]
        })
        .collect();
    table(
        &[
            "#",
            "run",
            "scheduled",
            "started",
            "took",
            "outcome",
            "status",
            "probe",
            "excerpt",
            "payload",
        ],
        &rows,
    )
}
