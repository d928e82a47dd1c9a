//! `outbox consumers list|delete|pause|resume`: the in-process consumers (handlers) a
//! dispatcher registered. Consumers belong to the whole outbox (they receive every tenant's messages),
//! so these commands take no `--tenant`.

use clap::{Args, Subcommand};
use outboxkit_core::{ConsumerName, ConsumerStatus};

use crate::error::CliResult;
use crate::store::LocationArgs;
use crate::util::{emit_json, table};
use crate::{json, out, outln};

/// `outbox consumers`.
#[derive(Debug, Subcommand)]
pub enum ConsumersCmd {
    /// List the registered consumers, their topic filters and status (active or paused).
    List(ListArgs),
    /// Pause a consumer: its deliveries wait, held (none is lost, no attempt is spent),
    /// and dispatchers stop claiming it within about a second; one running finishes.
    Pause(StatusArgs),
    /// Resume a paused consumer: its held deliveries are due again (a delayed message at
    /// its own time) and go out in order.
    Resume(StatusArgs),
    /// Remove a consumer that no dispatcher serves any more: it stops receiving new messages
    /// (a dispatcher that still has the handler registers it again when it starts).
    Delete(DeleteArgs),
}

/// `consumers list`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  outbox consumers list --store sqlite:./outbox.sqlite --json")]
pub struct ListArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// `consumers delete`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox consumers delete --store sqlite:./outbox.sqlite billing"
)]
pub struct DeleteArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// The consumer's name.
    name: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `consumers pause` and `consumers resume`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  outbox consumers pause --store sqlite:./outbox.sqlite billing")]
pub struct StatusArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// The consumer's name.
    name: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// Pause or resume; an unknown consumer fails (exit 1) and changes nothing.
async fn set_status(a: StatusArgs, status: ConsumerStatus) -> CliResult<()> {
    let name = ConsumerName::new(&a.name)?;
    let env = a.store.open().await?;
    let c = env.store.set_consumer_status(&name, status).await?;
    if a.json {
        return emit_json(&serde_json::json!({
            "name": c.name.to_string(),
            "status": c.status.as_str(),
        }));
    }
    match c.status {
        ConsumerStatus::Paused => outln!("paused consumer {name}: its deliveries are held"),
        ConsumerStatus::Active => outln!("resumed consumer {name}"),
    }
    Ok(())
}

/// Run a `consumers` command.
pub async fn run(cmd: ConsumersCmd) -> CliResult<()> {
    match cmd {
        ConsumersCmd::List(a) => {
            let env = a.store.open().await?;
            let consumers = env.store.list_consumers().await?;
            if a.json {
                return emit_json(&serde_json::json!({
                    "consumers": consumers.iter().map(|c| serde_json::json!({
                        "name": c.name.to_string(),
                        "filter": c.filter.to_string(),
                        "created_at": json::time(c.created_at),
                        "status": c.status.as_str(),
                    })).collect::<Vec<_>>(),
                }));
            }
            let rows: Vec<Vec<String>> = consumers
                .iter()
                .map(|c| {
                    vec![
                        c.name.to_string(),
                        c.filter.to_string(),
                        c.created_at.to_string(),
                        c.status.as_str().to_owned(),
                    ]
                })
                .collect();
            out!("{}", table(&["name", "filter", "created", "status"], &rows));
        }
        ConsumersCmd::Pause(a) => set_status(a, ConsumerStatus::Paused).await?,
        ConsumersCmd::Resume(a) => set_status(a, ConsumerStatus::Active).await?,
        ConsumersCmd::Delete(a) => {
            let name = ConsumerName::new(&a.name)?;
            let env = a.store.open().await?;
            env.store.delete_consumer(&name).await?;
            if a.json {
                return emit_json(&serde_json::json!({ "deleted": name.to_string() }));
            }
            outln!("deleted consumer {name}");
        }
    }
    Ok(())
}
