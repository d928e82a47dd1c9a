//! `outbox replay | retry | release-held | cancel`: one delivery by id, or every delivery of
//! the tenant matching filters, with `--dry-run` and a progress bar on a terminal
//! (`cancel`'s arguments and `--message` are in `cancel.rs`).
//!
//! A bulk run reads the whole match first (page by page), then changes each delivery with the
//! same single-delivery operation an operator would run by hand. A delivery that changed in
//! between (another operator, the relay) is reported as skipped, not as a failure.

use clap::Args;
use outboxkit_core::{
    Cursor, DeadReason, Delivery, DeliveryFilter, DeliveryId, DeliveryStatus, EndpointId,
    ErrorKind, PageRequest, Topic,
};
use outboxkit_dispatch::Operator;
use serde_json::{json, Value};

use crate::deliveries::{row, HEADER};
use crate::error::{CliError, CliResult};
use crate::store::{Env, StoreArgs};
use crate::util::{emit_json, parse_flag_time, progress, table};
use crate::{json, outln};

/// Filters shared by the bulk operations (every given filter must match).
#[derive(Debug, Args)]
pub struct Filters {
    /// Only deliveries to this endpoint.
    #[arg(long)]
    endpoint: Option<String>,
    /// Only this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Only deliveries created at or after this time: RFC 3339, or a duration ago (2h).
    #[arg(long)]
    since: Option<String>,
    /// Only deliveries created before this time: RFC 3339, or a duration ago (30m).
    #[arg(long)]
    until: Option<String>,
    /// Act on every matching delivery of the tenant even when no filter is given.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print what would change and change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

impl Filters {
    pub(crate) fn any(&self) -> bool {
        self.endpoint.is_some()
            || self.topic.is_some()
            || self.since.is_some()
            || self.until.is_some()
    }

    /// Check every filter (before the store is opened) and build the store filter.
    pub(crate) fn parse(&self, env_now: outboxkit_core::Timestamp) -> CliResult<DeliveryFilter> {
        Ok(DeliveryFilter {
            endpoint: self
                .endpoint
                .as_deref()
                .map(EndpointId::parse)
                .transpose()?,
            topic: self.topic.as_deref().map(Topic::new).transpose()?,
            since: self
                .since
                .as_deref()
                .map(|s| parse_flag_time("since", s, env_now))
                .transpose()?,
            until: self
                .until
                .as_deref()
                .map(|s| parse_flag_time("until", s, env_now))
                .transpose()?,
            ..DeliveryFilter::default()
        })
    }
}

/// `replay`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox replay --store sqlite:./outbox.sqlite 0193a0c4-…\n  outbox replay --store sqlite:./outbox.sqlite --endpoint 0193… --dead-reason max_attempts --since 24h --dry-run\n  outbox replay --store sqlite:./outbox.sqlite --topic order.created --json"
)]
pub struct ReplayArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// One delivery id (instead of filters).
    id: Option<String>,
    /// Only deliveries dead for this reason (max_attempts, permanent, gone, endpoint-removed,
    /// endpoint-disabled, mail-refused, unknown-outcome, unrenderable, cancelled).
    #[arg(long)]
    dead_reason: Option<String>,
    #[command(flatten)]
    filters: Filters,
}

/// `retry`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox retry --store sqlite:./outbox.sqlite 0193a0c4-…\n  outbox retry --store sqlite:./outbox.sqlite --endpoint 0193… --status pending --dry-run"
)]
pub struct RetryArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// One delivery id (instead of filters).
    id: Option<String>,
    /// Only `pending` or only `held` deliveries (default: both).
    #[arg(long)]
    status: Option<String>,
    /// Reset held deliveries to a fresh budget (attempts and snoozes 0) instead of keeping
    /// their attempts; only `held` deliveries qualify (another status is refused, exit 1).
    #[arg(long)]
    reset: bool,
    #[command(flatten)]
    filters: Filters,
}

/// `release-held`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox release-held --store sqlite:./outbox.sqlite --endpoint 0193…\n  outbox release-held --store sqlite:./outbox.sqlite --endpoint 0193… --topic order.created --dry-run --json"
)]
pub struct ReleaseHeldArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    filters: Filters,
}

/// Which operation a bulk run applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Replay,
    Retry,
    Reset,
    ReleaseHeld,
    Cancel,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Retry => "retry",
            Action::Reset => "retry --reset",
            Action::ReleaseHeld => "release-held",
            Action::Cancel => "cancel",
        }
    }

    /// The audit log's name of the action.
    fn audit(self) -> &'static str {
        match self {
            Action::Replay => "delivery.replay",
            Action::Retry => "delivery.retry",
            Action::Reset => "delivery.reset",
            Action::ReleaseHeld => "delivery.release-held",
            Action::Cancel => "delivery.cancel",
        }
    }

    fn past(self) -> &'static str {
        match self {
            Action::Replay => "replayed",
            Action::Retry => "made due now",
            Action::Reset => "reset to a fresh budget",
            Action::ReleaseHeld => "released",
            Action::Cancel => "cancelled",
        }
    }

    async fn apply(self, op: &Operator, env: &Env, id: DeliveryId) -> outboxkit_core::Result<()> {
        match self {
            Action::Replay => op.replay(&env.tenant, id).await,
            Action::Reset => op.reset(&env.tenant, id).await,
            Action::Cancel => op.cancel(&env.tenant, id).await,
            // A held delivery made due now is released: the same store operation.
            Action::Retry | Action::ReleaseHeld => op.retry_now(&env.tenant, id).await,
        }
    }
}

pub(crate) fn parse_id(id: &str) -> CliResult<DeliveryId> {
    Ok(DeliveryId::parse(id)?)
}

/// `replay`.
pub async fn replay(a: ReplayArgs) -> CliResult<()> {
    let reason = a
        .dead_reason
        .as_deref()
        .map(DeadReason::parse)
        .transpose()?;
    if let Some(id) = &a.id {
        single_only(&a.filters, a.dead_reason.is_some())?;
        let id = parse_id(id)?;
        let env = a.store.open().await?;
        return single(Action::Replay, &env, id, &a.filters).await;
    }
    let filter = a.filters.parse(now())?;
    require_filter(&a.filters, reason.is_some())?;
    let env = a.store.open().await?;
    let matched = collect(&env, &filter, &[DeliveryStatus::Dead], |d| {
        reason.is_none_or(|r| d.dead_reason == Some(r))
    })
    .await?;
    run_bulk(Action::Replay, &env, matched, &a.filters).await
}

/// `retry`.
pub async fn retry(a: RetryArgs) -> CliResult<()> {
    let action = if a.reset {
        Action::Reset
    } else {
        Action::Retry
    };
    let statuses = match a.status.as_deref() {
        None if a.reset => vec![DeliveryStatus::Held],
        None => vec![DeliveryStatus::Pending, DeliveryStatus::Held],
        Some(_) if a.reset => {
            return Err(CliError::usage(
                "invalid input: --status: --reset acts on held deliveries only",
            ))
        }
        Some(s) => match DeliveryStatus::parse(s)? {
            st @ (DeliveryStatus::Pending | DeliveryStatus::Held) => vec![st],
            _ => {
                return Err(CliError::usage(
                    "invalid input: --status: retry acts on pending or held deliveries",
                ))
            }
        },
    };
    if let Some(id) = &a.id {
        single_only(&a.filters, a.status.is_some())?;
        let id = parse_id(id)?;
        let env = a.store.open().await?;
        return single(action, &env, id, &a.filters).await;
    }
    let filter = a.filters.parse(now())?;
    require_filter(&a.filters, a.status.is_some())?;
    let env = a.store.open().await?;
    let matched = collect(&env, &filter, &statuses, |_| true).await?;
    run_bulk(action, &env, matched, &a.filters).await
}

/// `release-held`: with only `--endpoint`, the store releases the endpoint's held
/// deliveries in one operation; with more filters, each matching held delivery is released.
/// An endpoint of another tenant is not found (exit 1).
pub async fn release_held(a: ReleaseHeldArgs) -> CliResult<()> {
    let filter = a.filters.parse(now())?;
    require_filter(&a.filters, false)?;
    let env = a.store.open().await?;
    if let Some(ep) = filter.endpoint {
        // Not found in this tenant is not found, as for every other cross-tenant call.
        env.store.get_endpoint(&env.tenant, ep).await?;
    }
    let matched = collect(&env, &filter, &[DeliveryStatus::Held], |_| true).await?;
    let only_endpoint = filter.endpoint.is_some()
        && filter.topic.is_none()
        && filter.since.is_none()
        && filter.until.is_none();
    match filter.endpoint {
        Some(ep) if only_endpoint && !a.filters.dry_run => {
            let n = Operator::new(env.store.clone(), env.clock.clone())
                .release_held(&env.tenant, ep)
                .await?;
            if a.filters.json {
                return emit_json(&json!({
                    "action": "release-held",
                    "dry_run": false,
                    "matched": n,
                    "changed": n,
                    "skipped": [],
                    "deliveries": matched.iter().map(json::delivery).collect::<Vec<_>>(),
                }));
            }
            outln!("released {n} held deliveries");
            Ok(())
        }
        _ => run_bulk(Action::ReleaseHeld, &env, matched, &a.filters).await,
    }
}

pub(crate) fn now() -> outboxkit_core::Timestamp {
    outboxkit_core::Clock::now(&outboxkit_core::SystemClock)
}

/// With a delivery id, filters make no sense: refuse them rather than ignore them.
pub(crate) fn single_only(f: &Filters, extra: bool) -> CliResult<()> {
    if f.any() || f.all || extra {
        return Err(CliError::usage(
            "invalid input: give either a delivery id or filters, not both",
        ));
    }
    Ok(())
}

/// A bulk run needs at least one filter, or `--all`.
pub(crate) fn require_filter(f: &Filters, extra: bool) -> CliResult<()> {
    if !f.any() && !f.all && !extra {
        return Err(CliError::usage(
            "invalid input: give a delivery id, at least one filter (--endpoint, --topic, --since, --until, …) or --all",
        ));
    }
    Ok(())
}

/// Every delivery of the tenant in one of `statuses` that passes `filter` and `keep`.
pub(crate) async fn collect(
    env: &Env,
    filter: &DeliveryFilter,
    statuses: &[DeliveryStatus],
    keep: impl Fn(&Delivery) -> bool,
) -> CliResult<Vec<Delivery>> {
    let mut out = Vec::new();
    for status in statuses {
        let f = DeliveryFilter {
            status: Some(*status),
            ..filter.clone()
        };
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = env
                .store
                .list_deliveries(
                    &env.tenant,
                    &f,
                    PageRequest {
                        limit: 1000,
                        cursor,
                    },
                )
                .await?;
            out.extend(page.items.into_iter().filter(|d| keep(d)));
            match page.next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    Ok(out)
}

/// One delivery by id; `--dry-run` reads it and says whether the operation would apply.
pub(crate) async fn single(
    action: Action,
    env: &Env,
    id: DeliveryId,
    f: &Filters,
) -> CliResult<()> {
    let op = Operator::new(env.store.clone(), env.clock.clone());
    if f.dry_run {
        let d = env.store.get_delivery(&env.tenant, id).await?;
        let applies = match action {
            Action::Replay => d.status == DeliveryStatus::Dead,
            Action::Reset => d.status == DeliveryStatus::Held,
            Action::Cancel => d.status.check_cancel().is_ok(),
            Action::Retry | Action::ReleaseHeld => {
                matches!(d.status, DeliveryStatus::Pending | DeliveryStatus::Held)
            }
        };
        return report(
            action,
            f,
            std::slice::from_ref(&d),
            usize::from(applies),
            &[],
        );
    }
    action.apply(&op, env, id).await?;
    crate::audit::record(
        env,
        Some(&env.tenant),
        action.audit(),
        &id.to_string(),
        "from the cli".to_owned(),
    )
    .await;
    if f.json {
        let d = env.store.get_delivery(&env.tenant, id).await?;
        return report(action, f, &[d], 1, &[]);
    }
    match action {
        Action::Replay => outln!("replayed delivery {id}: due now with a fresh budget"),
        Action::Reset => outln!("delivery {id} is due now with a fresh budget"),
        Action::Cancel => outln!("cancelled delivery {id}: dead (cancelled), never sent"),
        Action::Retry | Action::ReleaseHeld => outln!("delivery {id} is due now"),
    }
    Ok(())
}

pub(crate) async fn run_bulk(
    action: Action,
    env: &Env,
    matched: Vec<Delivery>,
    f: &Filters,
) -> CliResult<()> {
    if f.dry_run {
        return report(action, f, &matched, matched.len(), &[]);
    }
    let op = Operator::new(env.store.clone(), env.clock.clone());
    let bar = progress(matched.len() as u64, f.json, action.name());
    let mut changed = 0;
    let mut skipped: Vec<(DeliveryId, String)> = Vec::new();
    for d in &matched {
        match action.apply(&op, env, d.id).await {
            Ok(()) => changed += 1,
            // Changed by someone else since it was listed: report, go on.
            Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                skipped.push((d.id, e.to_string()));
            }
            Err(e) => {
                bar.abandon();
                return Err(CliError::failed(format!(
                    "{} stopped after {changed} of {} deliveries: {e}",
                    action.name(),
                    matched.len()
                )));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if changed > 0 {
        crate::audit::record(
            env,
            Some(&env.tenant),
            action.audit(),
            &format!("{changed} deliveries"),
            format!(
                "bulk from the cli: {changed} changed, {} skipped",
                skipped.len()
            ),
        )
        .await;
    }
    report(action, f, &matched, changed, &skipped)
}

fn report(
    action: Action,
    f: &Filters,
    matched: &[Delivery],
    changed: usize,
    skipped: &[(DeliveryId, String)],
) -> CliResult<()> {
    if f.json {
        let skipped: Vec<Value> = skipped
            .iter()
            .map(|(id, why)| json!({ "id": id.to_string(), "error": why }))
            .collect();
        return emit_json(&json!({
            "action": action.name(),
            "dry_run": f.dry_run,
            "matched": matched.len(),
            "changed": if f.dry_run { 0 } else { changed },
            "would_change": if f.dry_run { changed } else { 0 },
            "skipped": skipped,
            "deliveries": matched.iter().map(json::delivery).collect::<Vec<_>>(),
        }));
    }
    if f.dry_run {
        let rows: Vec<Vec<String>> = matched.iter().map(row).collect();
        if !rows.is_empty() {
            crate::out!("{}", table(&HEADER, &rows));
        }
        outln!(
            "dry run: {} would affect {changed} deliveries; nothing changed",
            action.name()
        );
        return Ok(());
    }
    outln!("{} {changed} deliveries", action.past());
    for (id, why) in skipped {
        outln!("skipped {id}: {why}");
    }
    Ok(())
}
