//! `outbox`: the demo, the relay and the operator's tools for the outbox library.
//!
//! Exit codes: 0 success, 1 the operation failed, 2 bad usage or input.

mod deliveries;
mod demo;
mod endpoints;
mod error;
mod listen;
mod ops;
mod relay;
mod store;
mod tenancy;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliResult;

/// Reliable "write it, then deliver it": events recorded in your transaction, delivered at
/// least once to handlers, signed webhooks and e-mail.
#[derive(Debug, Parser)]
#[command(name = "outbox", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the demo: events enqueued in transactions on an embedded SQLite store, delivered
    /// to a handler, two local webhook receivers that fail for a while, and a mail stand-in;
    /// retries, a held delivery released by a secret rotation, a 410, a replay, the ledger.
    Demo(demo::DemoArgs),
    /// Create or upgrade a store's schema (sqlite:PATH, postgres://…, redis://…).
    Migrate(store::StoreArgs),
    /// Manage webhook endpoints.
    #[command(subcommand)]
    Endpoints(endpoints::EndpointsCmd),
    /// Read deliveries and their attempt ledger.
    #[command(subcommand)]
    Deliveries(deliveries::DeliveriesCmd),
    /// Enqueue one event (for scripts and smoke tests).
    Enqueue(ops::EnqueueArgs),
    /// Give a dead delivery a fresh budget, due now.
    Replay(ops::DeliveryArgs),
    /// Release an endpoint's held deliveries (after fixing its credentials).
    ReleaseHeld(ops::ReleaseHeldArgs),
    /// Make a pending or held delivery due now.
    Retry(ops::DeliveryArgs),
    /// Remove finished deliveries older than a cutoff: every tenant in rotation, each with
    /// its own window (`--tenant-window acme=90d`), or only `--tenant`.
    Purge(tenancy::PurgeArgs),
    /// Delivery counts by status and the age of the oldest due delivery: every tenant, only
    /// `--tenant`, or one `--endpoint`.
    Stats(tenancy::StatsArgs),
    /// Tenants and their delivery counts.
    #[command(subcommand)]
    Tenants(tenancy::TenantsCmd),
    /// Run the dispatcher as a sidecar: deliver webhooks and e-mail until SIGINT/SIGTERM.
    Relay(relay::RelayArgs),
    /// A local receiver that verifies signatures and prints each event.
    Listen(listen::ListenArgs),
    /// Print a new random vault key (64 hex digits) for OUTBOX_VAULT_KEY.
    Keygen,
}

async fn run(cli: Cli) -> CliResult<()> {
    match cli.command {
        Command::Demo(a) => demo::run(a).await,
        Command::Migrate(a) => store::migrate(a).await,
        Command::Endpoints(c) => endpoints::run(c).await,
        Command::Deliveries(c) => deliveries::run(c).await,
        Command::Enqueue(a) => ops::enqueue(a).await,
        Command::Replay(a) => ops::replay(a).await,
        Command::ReleaseHeld(a) => ops::release_held(a).await,
        Command::Retry(a) => ops::retry(a).await,
        Command::Purge(a) => tenancy::purge(a).await,
        Command::Stats(a) => tenancy::stats(a).await,
        Command::Tenants(c) => tenancy::tenants(c).await,
        Command::Relay(a) => relay::run(a).await,
        Command::Listen(a) => listen::run(a).await,
        Command::Keygen => {
            let mut key = [0u8; 32];
            outboxkit_core::Entropy::fill(&outboxkit_core::OsEntropy, &mut key);
            println!(
                "{}",
                key.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("OUTBOX_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if matches!(cli.command, Command::Relay(_)) {
            "info"
        } else {
            "warn"
        })
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
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
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code)
        }
    }
}
