//! `outbox`: the demo, the relay and the operator's tools for the outbox library.
//!
//! Exit codes: 0 success, 1 the operation failed, 2 bad usage or input. A closed output pipe
//! (`outbox deliveries list | head -1`) ends a command quietly with 0.

mod attempt_view;
mod audit;
mod broker;
mod bulk;
mod cancel;
mod config;
mod consumers;
mod deliveries;
mod demo;
mod demo_broker;
mod endpoint_headers;
mod endpoints;
mod endpoints_common;
mod endpoints_test;
mod endpoints_view;
mod error;
mod event_types;
mod json;
mod listen;
mod logging;
mod metrics;
mod ops;
mod otel;
mod relay;
mod serve;
mod store;
mod tenancy;
mod tokens;
mod util;
mod vault_check;

use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::error::CliResult;

/// Reliable "write it, then deliver it": events recorded in your transaction, delivered at
/// least once to handlers, signed webhooks and e-mail.
#[derive(Debug, Parser)]
#[command(
    name = "outbox",
    version,
    propagate_version = true,
    after_help = "Examples:\n  outbox demo\n  outbox migrate --store sqlite:./outbox.sqlite\n  outbox deliveries list --store sqlite:./outbox.sqlite --status dead --json | jq '.deliveries[].id'\n  outbox replay --store sqlite:./outbox.sqlite --endpoint 0193… --dead-reason max_attempts --dry-run\n\nEvery command that prints takes --json (one JSON document; field names in the README).\nLogging: OUTBOX_LOG, else RUST_LOG, sets the filter (e.g. OUTBOX_LOG=debug; default info for the relay, warn for the rest); --log-format json (or OUTBOX_LOG_FORMAT=json) writes one JSON object per line to stderr; no colours unless stderr is a terminal. Exit codes: 0 ok, 1 failed, 2 bad usage or input."
)]
struct Cli {
    /// How log lines on stderr look: `text` (colours only on a terminal) or `json` (one
    /// object per line, for a log collector). The filter is OUTBOX_LOG, else RUST_LOG.
    #[arg(long, global = true, env = "OUTBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// A TOML file in which any flag of the command can be set (its long name as the key;
    /// top-level keys for every command, `[relay]`, `[serve]`, … for one). Precedence: the
    /// flag, then `OUTBOX_*` (every flag: `--poll-interval` is OUTBOX_POLL_INTERVAL), then
    /// the file, then the default. Unknown keys are refused. Example: deploy/outbox.toml.
    #[arg(long, global = true, env = "OUTBOX_CONFIG", value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo: events enqueued in transactions on an embedded SQLite store, delivered
    /// to a handler, two local webhook receivers that fail for a while, and a mail stand-in;
    /// retries, a held delivery released by a secret rotation, a 410, a replay, the ledger.
    Demo(demo::DemoArgs),
    /// Create or upgrade a store's schema (sqlite:PATH, postgres://…, redis://…).
    Migrate(store::MigrateArgs),
    /// Manage webhook endpoints.
    #[command(subcommand)]
    Endpoints(endpoints::EndpointsCmd),
    /// Read deliveries and their attempt ledger.
    #[command(subcommand)]
    Deliveries(deliveries::DeliveriesCmd),
    /// List or remove registered in-process consumers (handlers).
    #[command(subcommand)]
    Consumers(consumers::ConsumersCmd),
    /// The event-type catalogue: registered topics, their JSON Schemas, and whether
    /// enqueue refuses what is not in it.
    #[command(subcommand)]
    EventTypes(event_types::EventTypesCmd),
    /// Enqueue one event (for scripts and smoke tests).
    Enqueue(ops::EnqueueArgs),
    /// Give dead deliveries a fresh budget, due now: one by id, or every match of filters.
    Replay(bulk::ReplayArgs),
    /// Release held deliveries (after fixing an endpoint's credentials): an endpoint's, or
    /// every match of filters.
    ReleaseHeld(bulk::ReleaseHeldArgs),
    /// Make pending or held deliveries due now: one by id, or every match of filters
    /// (`--reset`: held ones with a fresh budget).
    Retry(bulk::RetryArgs),
    /// Cancel pending or held deliveries before they are sent (dead: cancelled; `replay`
    /// sends one again): one by id, every one of `--message`, or every match of filters.
    Cancel(cancel::CancelArgs),
    /// Remove finished deliveries older than a cutoff: every tenant in rotation, each with
    /// its own window (`--tenant-window acme=90d`), or only `--tenant`.
    Purge(tenancy::PurgeArgs),
    /// Delivery counts by status and the age of the oldest due delivery: every tenant, only
    /// `--tenant`, or one `--endpoint`.
    Stats(tenancy::StatsArgs),
    /// Tenants and their delivery counts.
    #[command(subcommand)]
    Tenants(tenancy::TenantsCmd),
    /// Run the dispatcher as a sidecar: deliver webhooks and e-mail until SIGINT/SIGTERM
    /// (or, with --until-idle, until nothing is due).
    Relay(Box<relay::RelayArgs>),
    /// A local receiver that verifies signatures, answers like a careful receiver and prints
    /// each event.
    Listen(listen::ListenArgs),
    /// Serve the admin HTTP API (/v1, with its OpenAPI document) and the web console
    /// (/console) until SIGINT/SIGTERM.
    Serve(serve::ServeArgs),
    /// Create, list or revoke the bearer tokens of `outbox serve`.
    #[command(subcommand)]
    Tokens(tokens::TokensCmd),
    /// Print a new random vault key (64 hex digits) for OUTBOX_VAULT_KEY.
    Keygen(KeygenArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    Completions(CompletionsArgs),
}

/// `keygen`.
#[derive(Debug, Args)]
#[command(after_help = "Example:\n  export OUTBOX_VAULT_KEY=$(outbox keygen)")]
struct KeygenArgs {
    /// Print `{"key": "…"}` instead of the bare key.
    #[arg(long)]
    json: bool,
}

/// `completions`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox completions bash > /etc/bash_completion.d/outbox\n  outbox completions zsh > \"${fpath[1]}/_outbox\"\n  outbox completions fish > ~/.config/fish/completions/outbox.fish"
)]
struct CompletionsArgs {
    /// The shell.
    shell: clap_complete::Shell,
}

async fn run(cli: Cli) -> CliResult<()> {
    match cli.command {
        Command::Demo(a) => demo::run(a).await,
        Command::Migrate(a) => store::migrate(a).await,
        Command::Endpoints(c) => endpoints::run(c).await,
        Command::Deliveries(c) => deliveries::run(c).await,
        Command::Consumers(c) => consumers::run(c).await,
        Command::EventTypes(c) => event_types::run(c).await,
        Command::Enqueue(a) => ops::enqueue(a).await,
        Command::Replay(a) => bulk::replay(a).await,
        Command::ReleaseHeld(a) => bulk::release_held(a).await,
        Command::Retry(a) => bulk::retry(a).await,
        Command::Cancel(a) => cancel::cancel(a).await,
        Command::Purge(a) => tenancy::purge(a).await,
        Command::Stats(a) => tenancy::stats(a).await,
        Command::Tenants(c) => tenancy::tenants(c).await,
        Command::Relay(a) => relay::run(*a).await,
        Command::Listen(a) => listen::run(a).await,
        Command::Serve(a) => serve::run(a).await,
        Command::Tokens(c) => tokens::run(c).await,
        Command::Keygen(a) => {
            let mut key = [0u8; 32];
            outboxkit_core::Entropy::fill(&outboxkit_core::OsEntropy, &mut key);
            let key = key.iter().map(|b| format!("{b:02x}")).collect::<String>();
            if a.json {
                util::emit_json(&serde_json::json!({ "key": key }))
            } else {
                util::emit(&format!("{key}\n"))
            }
        }
        Command::Completions(a) => {
            let mut out = Vec::new();
            clap_complete::generate(a.shell, &mut Cli::command(), "outbox", &mut out);
            util::emit(&String::from_utf8_lossy(&out))
        }
    }
}

/// The log filter: `OUTBOX_LOG`, else `RUST_LOG`, else `info` for the relay and `warn` for
/// the rest.
fn log_filter(relay: bool) -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env("OUTBOX_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(if relay { "info" } else { "warn" }))
}

fn main() -> ExitCode {
    let mut root = Cli::command();
    root.build();
    let args = match config::expand(&root, std::env::args_os().collect()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.code);
        }
    };
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let filter = log_filter(matches!(cli.command, Command::Relay(_) | Command::Serve(_)));
    let json_errors = matches!(cli.log_format, LogFormat::Json);
    let hold_warnings = matches!(cli.command, Command::Demo(_)) && !logging::filter_given();
    logging::init(json_errors, filter, hold_warnings);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(run(cli));
    // Do not wait for background tasks (a listener, a reconnecting pool) to notice.
    rt.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.message.is_empty() => ExitCode::from(e.code),
        Err(e) => {
            if json_errors {
                // One JSON object line, like every log line of `--log-format json`.
                eprintln!(
                    "{}",
                    serde_json::json!({
                        "level": "ERROR",
                        "fields": { "message": e.to_string(), "exit_code": e.code },
                        "target": "outbox",
                    })
                );
            } else {
                eprintln!("error: {e}");
            }
            ExitCode::from(e.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_has_an_example() {
        fn walk(c: &clap::Command, path: &str) {
            let path = format!("{path} {}", c.get_name());
            if c.has_subcommands() {
                for s in c.get_subcommands() {
                    walk(s, &path);
                }
                return;
            }
            let help = c
                .get_after_help()
                .map(ToString::to_string)
                .unwrap_or_default();
            assert!(help.contains("outbox "), "{path} has no example");
        }
        for s in Cli::command().get_subcommands() {
            walk(s, "outbox");
        }
    }
}
