//! `outbox listen`: a local receiver that verifies Standard Webhooks signatures and prints
//! each event (for developers wiring an endpoint).

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use outboxkit_core::WebhookSecret;
use outboxkit_testing::WebhookReceiver;

use crate::error::{CliError, CliResult};

/// `listen`.
#[derive(Debug, Args)]
pub struct ListenArgs {
    /// The port to listen on (on 127.0.0.1).
    #[arg(long, default_value_t = 8787)]
    port: u16,
    /// The endpoint's `whsec_…` secret (repeat during a rotation).
    #[arg(long, required = true)]
    secret: Vec<String>,
    /// Stop after this many requests (default: run until Ctrl-C).
    #[arg(long)]
    count: Option<usize>,
}

/// Run the listener.
pub async fn run(a: ListenArgs) -> CliResult<()> {
    let secrets = a
        .secret
        .iter()
        .map(|s| WebhookSecret::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], a.port));
    let receiver = WebhookReceiver::start_on(addr)
        .await
        .map_err(|e| CliError::failed(format!("cannot listen on {addr}: {e}")))?
        .with_secrets(secrets);
    eprintln!("listening on {} (Ctrl-C to stop)", receiver.url());
    let mut printed = 0;
    loop {
        let requests = receiver.requests();
        for r in &requests[printed..] {
            let verdict = if r.verified() {
                "verified"
            } else {
                "SIGNATURE INVALID"
            };
            println!(
                "{} {} [{}] id={}",
                r.method,
                r.path,
                verdict,
                r.webhook_id.clone().unwrap_or_default()
            );
            println!("{}", r.text());
        }
        printed = requests.len();
        if a.count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = receiver.wait_for(printed + 1, Duration::from_secs(3600)) => {}
        }
    }
}
