//! `outbox enqueue` (the bulk operations live in `bulk.rs`, purge and stats in `tenancy.rs`).

use std::io::Read;

use clap::Args;
use outboxkit_core::{parse_delay, NewMessage, SendAt, Timestamp};

use crate::error::{CliError, CliResult};
use crate::outln;
use crate::store::StoreArgs;
use crate::util::emit_json;

/// `enqueue`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox enqueue --store sqlite:./outbox.sqlite --topic order.created --data '{\"id\":42}' --key order-42\n  outbox enqueue --store sqlite:./outbox.sqlite --topic order.created --data @order.json\n  jq -c . order.json | outbox enqueue --store sqlite:./outbox.sqlite --topic order.created --data -\n  outbox enqueue --store sqlite:./outbox.sqlite --topic reminder.due --data '{}' --delay 10m\n  outbox enqueue --store sqlite:./outbox.sqlite --topic sale.starts --data '{}' --at 2026-12-24T00:00:00Z"
)]
pub struct EnqueueArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic (lowercase dotted, e.g. order.created).
    #[arg(long)]
    topic: String,
    /// The payload, as JSON: inline, `@FILE` to read a file, or `-` to read stdin (up to
    /// the store's payload limit, 256 KiB by default).
    #[arg(long)]
    data: String,
    /// An idempotency key: a second enqueue with the same tenant, topic and key does nothing.
    #[arg(long)]
    key: Option<String>,
    /// An ordering key: deliveries with the same key are delivered in order.
    #[arg(long)]
    ordering_key: Option<String>,
    /// Also send an e-mail to this recipient (repeatable).
    #[arg(long)]
    email: Vec<String>,
    /// Deliver no earlier than this long from now: `10m`, `1h30m`, `2d`, `500ms` (a bare
    /// number is seconds), at most the store's maximum delay (365 days).
    #[arg(
        long,
        value_name = "DURATION",
        conflicts_with = "at",
        allow_hyphen_values = true
    )]
    delay: Option<String>,
    /// Deliver no earlier than this time (RFC 3339, e.g. `2026-12-24T00:00:00Z`): not in
    /// the past, at most the store's maximum delay (365 days) ahead.
    #[arg(long, value_name = "TIME")]
    at: Option<String>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `enqueue`.
pub async fn enqueue(a: EnqueueArgs) -> CliResult<()> {
    let limits = outboxkit_core::Limits::default();
    let text = read_data(&a.data, limits.max_payload_bytes)?;
    // Validate that it is one JSON text without evaluating it, then store the bytes as given:
    // large integers, decimals, duplicate keys and whitespace reach the store unchanged.
    serde_json::from_str::<serde::de::IgnoredAny>(&text)
        .map_err(|e| CliError::usage(format!("invalid input: data: not JSON ({e})")))?;
    let mut m = NewMessage::raw(a.topic, text.into_bytes()).tenant(a.store.tenant_name());
    if let Some(k) = a.key {
        m = m.idempotency_key(k);
    }
    if let Some(k) = a.ordering_key {
        m = m.ordering_key(k);
    }
    for e in a.email {
        m = m.email(e);
    }
    let now = outboxkit_core::Clock::now(&outboxkit_core::SystemClock);
    let delay = a
        .delay
        .as_deref()
        .map(|d| parse_delay("--delay", d))
        .transpose()?;
    let at = a.at.as_deref().map(parse_at).transpose()?;
    let send_at = SendAt::from_parts("--delay", delay, at)?;
    send_at.check(&limits, now, "--delay", "--at")?;
    let m = send_at.apply(m);
    // Validate before opening the store, so bad input is exit 2 even when the store is
    // unreachable; the store validates again (with its own limits) before writing.
    m.clone().validate(&limits, now)?;
    let env = a.store.open().await?;
    let r = env.store.enqueue(m).await?;
    // The time the store wrote (a duplicate's is the first message's).
    let available_at = if send_at == SendAt::Now {
        None
    } else {
        let tenant = outboxkit_core::TenantId::new(a.store.tenant_name())?;
        Some(
            env.store
                .get_message(&tenant, r.message_id)
                .await?
                .available_at,
        )
    };
    if a.json {
        let mut v = serde_json::json!({
            "message_id": r.message_id.to_string(),
            "deliveries": r.deliveries,
            "duplicate": r.duplicate,
        });
        if let Some(t) = available_at {
            v["available_at"] = t.to_rfc3339().into();
        }
        return emit_json(&v);
    }
    let due = available_at
        .map(|t| format!(", due at {t}"))
        .unwrap_or_default();
    if r.duplicate {
        outln!("duplicate of message {} (nothing written)", r.message_id);
    } else {
        outln!(
            "enqueued message {} with {} deliveries{due}",
            r.message_id,
            r.deliveries
        );
    }
    Ok(())
}

/// The `--at` time: RFC 3339.
fn parse_at(s: &str) -> CliResult<Timestamp> {
    let bad = || {
        CliError::usage(format!(
            "invalid input: --at: {s:?} is not a time: use RFC 3339 (2026-12-24T00:00:00Z)"
        ))
    };
    let t = humantime::parse_rfc3339_weak(s.trim()).map_err(|_| bad())?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_millis()).ok())
        .ok_or_else(bad)?;
    Timestamp::from_unix_millis(ms).map_err(|_| bad())
}

/// The `--data` text: inline, `@FILE` or `-` (stdin), refused beyond `max` bytes (the bytes
/// are stored as given, so the store's own limit sees the same size).
fn read_data(data: &str, max: usize) -> CliResult<String> {
    let too_big = || {
        CliError::usage(format!(
            "invalid input: data: larger than the payload limit ({max} bytes)"
        ))
    };
    // Read one byte past the limit so an oversized input is refused without reading it all.
    let cap = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    let mut buf = Vec::new();
    if data == "-" {
        std::io::stdin()
            .lock()
            .take(cap)
            .read_to_end(&mut buf)
            .map_err(|e| {
                CliError::usage(format!("invalid input: data: cannot read stdin ({e})"))
            })?;
    } else if let Some(path) = data.strip_prefix('@') {
        let f = std::fs::File::open(path).map_err(|e| {
            CliError::usage(format!(
                "invalid input: data: cannot read {path} ({})",
                e.kind()
            ))
        })?;
        f.take(cap).read_to_end(&mut buf).map_err(|e| {
            CliError::usage(format!(
                "invalid input: data: cannot read {path} ({})",
                e.kind()
            ))
        })?;
    } else {
        return Ok(data.to_owned());
    }
    if buf.len() > max {
        return Err(too_big());
    }
    String::from_utf8(buf).map_err(|_| CliError::usage("invalid input: data: not UTF-8 text"))
}
