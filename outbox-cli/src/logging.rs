//! The log subscriber: text or JSON lines on stderr, and for the demo (unless the user set
//! a filter) warnings counted instead of printed, so its output reads as the story it tells.

use std::sync::atomic::{AtomicU64, Ordering};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

static WARNINGS: AtomicU64 = AtomicU64::new(0);

/// How many warnings were counted and not printed (the demo's summary shows it).
pub fn warnings_held() -> u64 {
    WARNINGS.load(Ordering::Relaxed)
}

/// Whether the user chose a filter (`OUTBOX_LOG` or `RUST_LOG`).
pub fn filter_given() -> bool {
    std::env::var_os("OUTBOX_LOG").is_some() || std::env::var_os("RUST_LOG").is_some()
}

struct CountWarnings;

impl<S: tracing::Subscriber> Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            WARNINGS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Install the subscriber. With `hold_warnings`, only errors are printed and warnings are
/// counted ([`warnings_held`]).
pub fn init(json: bool, filter: EnvFilter, hold_warnings: bool) {
    let filter = if hold_warnings {
        EnvFilter::new("error")
    } else {
        filter
    };
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let printed = if json {
        fmt.json()
            .with_ansi(false)
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed()
    } else {
        fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed()
    };
    let counted = hold_warnings
        .then(|| CountWarnings.with_filter(tracing_subscriber::filter::LevelFilter::WARN));
    tracing_subscriber::registry()
        .with(printed)
        .with(counted)
        .init();
}
