//! `outbox event-types add|update|list|show|delete|mode`: the event-type catalogue. Types
//! belong to the whole outbox (like consumers), so these commands take no `--tenant`.

use std::io::Read;

use clap::{Args, Subcommand};
use outboxkit_core::catalogue::MAX_SCHEMA;
use outboxkit_core::{CatalogueMode, ErrorKind, EventType, NewEventType, Topic};
use serde_json::{json, Value};

use crate::error::{CliError, CliResult};
use crate::store::LocationArgs;
use crate::util::{emit_json, table};
use crate::{json, out, outln};

/// `outbox event-types`.
#[derive(Debug, Subcommand)]
pub enum EventTypesCmd {
    /// Register a new event type (refused when its topic is registered: use `update`).
    Add(PutArgs),
    /// Change a registered type's description or schema (`--schema none` removes it).
    Update(PutArgs),
    /// List the registered types with their descriptions.
    List(ListArgs),
    /// Show one type with its schema.
    Show(TopicArgs),
    /// Remove a type.
    Delete(TopicArgs),
    /// Show the mode, or set it: `off` (nothing checked), `refuse-unknown` (unregistered
    /// topics refused), `validate` (payloads checked against their type's schema too).
    Mode(ModeArgs),
}

/// `event-types add|update`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox event-types add --store sqlite:./outbox.sqlite --topic order.created --description 'an order was placed' --schema @order.schema.json\n  outbox event-types update --store sqlite:./outbox.sqlite --topic order.created --schema none"
)]
pub struct PutArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// The topic (`order.created`).
    #[arg(long)]
    topic: String,
    /// What the event means.
    #[arg(long)]
    description: Option<String>,
    /// Its JSON Schema: inline JSON or `@FILE` (`none` with `update` removes it).
    #[arg(long)]
    schema: Option<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `event-types list`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  outbox event-types list --store sqlite:./outbox.sqlite --json")]
pub struct ListArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// `event-types show|delete`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox event-types show --store sqlite:./outbox.sqlite --topic order.created"
)]
pub struct TopicArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// The topic.
    #[arg(long)]
    topic: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `event-types mode`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox event-types mode --store sqlite:./outbox.sqlite\n  outbox event-types mode --store sqlite:./outbox.sqlite validate"
)]
pub struct ModeArgs {
    #[command(flatten)]
    store: LocationArgs,
    /// The mode to set (`off`, `refuse-unknown`, `validate`); without it, print the mode.
    mode: Option<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// One type as `--json` prints it.
pub fn event_type_json(t: &EventType) -> Value {
    json!({
        "topic": t.topic.to_string(),
        "description": t.description,
        "schema": t.schema,
        "created_at": json::time(t.created_at),
        "updated_at": json::time(t.updated_at),
    })
}

/// The `--schema` value: inline JSON, `@FILE`, or `none` (`None`: remove it).
fn read_schema(s: &str) -> CliResult<Option<Value>> {
    if s == "none" {
        return Ok(None);
    }
    let text = match s.strip_prefix('@') {
        Some(path) => {
            let cannot = |e: std::io::Error| {
                CliError::usage(format!(
                    "invalid input: schema: cannot read {path} ({})",
                    e.kind()
                ))
            };
            let mut buf = Vec::new();
            std::fs::File::open(path)
                .map_err(cannot)?
                .take(MAX_SCHEMA as u64 + 1)
                .read_to_end(&mut buf)
                .map_err(cannot)?;
            if buf.len() > MAX_SCHEMA {
                return Err(CliError::usage(
                    "invalid input: schema: must be at most 64 KiB",
                ));
            }
            String::from_utf8(buf)
                .map_err(|_| CliError::usage("invalid input: schema: not UTF-8 text"))?
        }
        None => s.to_owned(),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        CliError::usage(format!(
            "invalid input: schema: not JSON (line {}, column {})",
            e.line(),
            e.column()
        ))
    })
}

async fn put(a: PutArgs, adding: bool) -> CliResult<()> {
    let topic = Topic::new(&a.topic)?;
    let schema = a.schema.as_deref().map(read_schema).transpose()?;
    if adding && matches!(schema, Some(None)) {
        return Err(CliError::usage(
            "invalid input: schema: `none` is for `update` only",
        ));
    }
    let env = a.store.open().await?;
    let existing = match env.store.get_event_type(&topic).await {
        Ok(t) => Some(t),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let new = match (adding, existing) {
        (true, Some(_)) => {
            return Err(CliError::usage(format!(
                "invalid input: topic: `{topic}` is already registered (use `outbox event-types update`)"
            )))
        }
        (false, None) => {
            return Err(CliError::failed(format!(
                "not found: event type `{topic}` (use `outbox event-types add`)"
            )))
        }
        (true, None) => NewEventType {
            topic,
            description: a.description.unwrap_or_default(),
            schema: schema.flatten(),
        },
        (false, Some(e)) => NewEventType {
            topic,
            description: a.description.unwrap_or(e.description),
            schema: schema.unwrap_or(e.schema),
        },
    };
    let stored = env.store.put_event_type(&new).await?;
    if a.json {
        return emit_json(&json!({ "event_type": event_type_json(&stored) }));
    }
    let verb = if adding { "added" } else { "updated" };
    outln!(
        "{verb} event type {} ({})",
        stored.topic,
        if stored.schema.is_some() {
            "with a schema"
        } else {
            "no schema"
        }
    );
    Ok(())
}

/// Run an `event-types` command.
pub async fn run(cmd: EventTypesCmd) -> CliResult<()> {
    match cmd {
        EventTypesCmd::Add(a) => put(a, true).await?,
        EventTypesCmd::Update(a) => put(a, false).await?,
        EventTypesCmd::List(a) => {
            let env = a.store.open().await?;
            let types = env.store.list_event_types().await?;
            let mode = env.store.catalogue_mode().await?;
            if a.json {
                return emit_json(&json!({
                    "mode": mode.as_str(),
                    "event_types": types.iter().map(event_type_json).collect::<Vec<_>>(),
                }));
            }
            let rows: Vec<Vec<String>> = types
                .iter()
                .map(|t| {
                    vec![
                        t.topic.to_string(),
                        t.description.clone(),
                        if t.schema.is_some() { "yes" } else { "no" }.to_owned(),
                        t.updated_at.to_string(),
                    ]
                })
                .collect();
            out!(
                "{}",
                table(&["topic", "description", "schema", "updated"], &rows)
            );
            outln!("mode: {mode}");
        }
        EventTypesCmd::Show(a) => {
            let topic = Topic::new(&a.topic)?;
            let env = a.store.open().await?;
            let t = env.store.get_event_type(&topic).await?;
            if a.json {
                return emit_json(&json!({ "event_type": event_type_json(&t) }));
            }
            outln!("topic:       {}", t.topic);
            outln!("description: {}", t.description);
            outln!("created:     {}", t.created_at);
            outln!("updated:     {}", t.updated_at);
            match &t.schema {
                Some(s) => outln!(
                    "schema:\n{}",
                    serde_json::to_string_pretty(s).unwrap_or_default()
                ),
                None => outln!("schema:      none"),
            }
        }
        EventTypesCmd::Delete(a) => {
            let topic = Topic::new(&a.topic)?;
            let env = a.store.open().await?;
            env.store.delete_event_type(&topic).await?;
            if a.json {
                return emit_json(&json!({ "deleted": topic.to_string() }));
            }
            outln!("deleted event type {topic}");
        }
        EventTypesCmd::Mode(a) => {
            let set = a
                .mode
                .as_deref()
                .map(str::parse::<CatalogueMode>)
                .transpose()?;
            let env = a.store.open().await?;
            if let Some(m) = set {
                env.store.set_catalogue_mode(m).await?;
            }
            let mode = env.store.catalogue_mode().await?;
            if a.json {
                return emit_json(&json!({ "mode": mode.as_str() }));
            }
            outln!("mode: {mode}");
        }
    }
    Ok(())
}
