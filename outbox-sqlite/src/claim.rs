//! The claim protocol on SQLite: claim, complete, release, extend, mark sending. Each runs
//! inside one `BEGIN IMMEDIATE` transaction on the writer connection, so claims are
//! exclusive across threads and processes.

use std::collections::HashMap;
use std::time::Duration;

use outboxkit_core::{
    AttemptRecord, ClaimRequest, ClaimToken, Claimed, Completion, DeliveryUpdate, Entropy, Error,
    Lease, Message, MessageId, ReleaseReport, Timestamp,
};
use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms, opt_ms};
use crate::sql;

/// The JSON arguments of the claim statements.
struct Sources {
    consumers: String,
    excluded: String,
    dormant: String,
    webhooks: Option<u32>,
    email: Option<u32>,
    min_budget: u32,
}

impl Sources {
    fn of(request: &ClaimRequest) -> Result<Self> {
        let consumers: serde_json::Map<String, serde_json::Value> = request
            .consumers()
            .map(|(name, budget)| (name.to_string(), budget.into()))
            .collect();
        let topics = |set: &std::collections::BTreeSet<outboxkit_core::Topic>| {
            serde_json::to_string(&set.iter().map(|t| t.as_str()).collect::<Vec<_>>())
        };
        let min_budget = request
            .consumers()
            .map(|(_, b)| b)
            .chain(request.webhook_budget())
            .chain(request.email_budget())
            .min()
            .unwrap_or(1);
        let json = |r: serde_json::Result<String>| r.map_err(|_| SqliteError::Corrupt("claim"));
        Ok(Sources {
            consumers: json(serde_json::to_string(&consumers))?,
            excluded: json(topics(request.excluded_topics()))?,
            dormant: json(topics(request.dormant()))?,
            webhooks: request.webhook_budget(),
            email: request.email_budget(),
            min_budget,
        })
    }
}

/// Fresh claim tokens: one entropy read for the whole batch.
fn tokens(n: usize, entropy: &dyn Entropy) -> Vec<ClaimToken> {
    let mut bytes = vec![0u8; n * 16];
    entropy.fill(&mut bytes);
    bytes
        .chunks_exact(16)
        .map(|c| {
            let mut b = [0u8; 16];
            b.copy_from_slice(c);
            ClaimToken::from_uuid(uuid::Builder::from_random_bytes(b).into_uuid())
        })
        .collect()
}

/// Discard exhausted candidates, then lease up to `batch_size` claimable ones (ARCHITECTURE
/// "Claim"). The request is validated by the caller.
pub(crate) fn claim(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    entropy: &dyn Entropy,
) -> Result<Vec<Claimed>> {
    let s = Sources::of(request)?;
    conn.prepare_cached(sql::CLAIM_DISCARD_EXHAUSTED)?
        .execute(named_params! {
            ":now": ms(now),
            ":min_budget": s.min_budget,
            ":excluded": s.excluded,
            ":webhooks": s.webhooks,
            ":email": s.email,
            ":consumers": s.consumers,
        })?;

    let batch = request.batch_size() as usize;
    let tokens = tokens(batch, entropy);
    let mut token_bytes = Vec::with_capacity(batch * 36);
    for t in &tokens {
        token_bytes.extend_from_slice(t.as_uuid().hyphenated().to_string().as_bytes());
    }
    let until = now.saturating_add(request.lease());
    let mut stmt = conn.prepare_cached(sql::CLAIM)?;
    let mut rows = stmt.query(named_params! {
        ":now": ms(now),
        ":until": ms(until),
        ":batch": request.batch_size(),
        ":tokens": token_bytes,
        ":excluded": s.excluded,
        ":dormant": s.dormant,
        ":consumers": s.consumers,
        ":webhooks": s.webhooks,
        ":email": s.email,
    })?;
    let mut claimed = Vec::new();
    while let Some(row) = rows.next()? {
        let delivery = rows::delivery(row)?;
        let (token, claimed_from) = rows::claim_extra(row)?;
        claimed.push((delivery, token, claimed_from));
    }
    drop(rows);
    drop(stmt);
    if claimed.is_empty() {
        return Ok(Vec::new());
    }

    // RETURNING order is unspecified; token n went to the n-th row in claim order.
    let order: HashMap<ClaimToken, usize> =
        tokens.iter().enumerate().map(|(i, t)| (*t, i)).collect();
    claimed.sort_by_key(|(_, token, _)| order.get(token).copied().unwrap_or(usize::MAX));

    let mut ids: Vec<String> = claimed
        .iter()
        .map(|(d, _, _)| d.message_id.to_string())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let ids = serde_json::to_string(&ids).map_err(|_| SqliteError::Corrupt("claim"))?;
    let mut stmt = conn.prepare_cached(sql::MESSAGES_BY_IDS)?;
    let messages: HashMap<MessageId, Message> = rows::collect(&mut stmt, [ids], rows::message)?
        .into_iter()
        .map(|m| (m.id, m))
        .collect();

    claimed
        .into_iter()
        .map(|(delivery, token, claimed_from)| {
            let message = messages
                .get(&delivery.message_id)
                .cloned()
                .ok_or(SqliteError::Corrupt("delivery without its message"))?;
            let lease = Lease {
                delivery_id: delivery.id,
                tenant: delivery.tenant.clone(),
                token,
                until,
                attempts: delivery.attempts,
                snoozes: delivery.snoozes,
                claimed_from,
            };
            Ok(Claimed {
                lease,
                delivery,
                message,
            })
        })
        .collect()
}

/// Write `update` under the lease's fence; append `attempt` (with the lease's probe flag)
/// and disable the endpoint when the update says so. `LeaseLost` changes nothing.
fn settle(
    conn: &Connection,
    lease: &Lease,
    update: &DeliveryUpdate,
    attempt: Option<&AttemptRecord>,
    now: Timestamp,
) -> Result<()> {
    let last = update.last_outcome.as_ref();
    let changed = conn.prepare_cached(sql::SETTLE)?.execute(params![
        lease.delivery_id.to_string(),
        lease.tenant.as_str(),
        lease.token.to_string(),
        update.status.as_str(),
        update.attempts,
        update.snoozes,
        ms(update.next_attempt_at),
        opt_ms(update.completed_at),
        update.dead_reason.map(|r| r.as_str()),
        last.is_some(),
        last.map(|l| l.outcome.as_str()),
        last.and_then(|l| l.status_code),
        last.and_then(|l| l.excerpt.as_deref()),
        last.map(|l| ms(l.at)),
        ms(now),
        attempt.is_some(),
    ])?;
    if changed == 0 {
        return Err(Error::lease_lost().into());
    }
    if let Some(a) = attempt {
        conn.prepare_cached(sql::INSERT_ATTEMPT)?.execute(params![
            lease.delivery_id.to_string(),
            lease.is_probe(),
            ms(a.started_at),
            ms(a.finished_at),
            a.outcome.as_str(),
            a.status_code,
            a.excerpt.as_deref(),
        ])?;
        conn.prepare_cached(sql::ENDPOINT_LAST_DELIVERY)?
            .execute(params![
                lease.delivery_id.to_string(),
                lease.tenant.as_str(),
                a.outcome.as_str(),
                a.status_code,
                ms(a.finished_at),
            ])?;
    }
    if update.disable_endpoint {
        let endpoint: Option<String> = conn
            .prepare_cached(sql::DELIVERY_ENDPOINT)?
            .query_row([lease.delivery_id.to_string()], |r| r.get(0))
            .optional()?;
        if let Some(endpoint) = endpoint {
            conn.prepare_cached(sql::DISABLE_ENDPOINT_GONE)?
                .execute(params![endpoint, lease.tenant.as_str(), ms(now)])?;
        }
    }
    Ok(())
}

/// End one claim with a verdict.
pub(crate) fn complete(
    conn: &Connection,
    lease: &Lease,
    completion: &Completion,
    now: Timestamp,
) -> Result<()> {
    let mut update = lease.settle(&completion.verdict, completion.attempt.as_ref(), now);
    if update.awaits_endpoint {
        // The endpoint may have been resumed or deleted while the delivery was claimed.
        let status: Option<Option<String>> = conn
            .prepare_cached(sql::ENDPOINT_STATUS_OF_DELIVERY)?
            .query_row(
                params![lease.delivery_id.to_string(), lease.tenant.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        if matches!(status, Some(None)) || matches!(status, Some(Some(ref s)) if s == "active") {
            update.endpoint_is_back(now);
        }
    }
    settle(conn, lease, &update, completion.attempt.as_ref(), now)
}

/// End many claims in one transaction: a lost lease is that item's `LeaseLost`; any other
/// failure aborts the whole call (nothing is written).
pub(crate) fn complete_many(
    conn: &Connection,
    items: &[(Lease, Completion)],
    now: Timestamp,
) -> Result<Vec<outboxkit_core::Result<()>>> {
    let mut out = Vec::with_capacity(items.len());
    for (lease, completion) in items {
        match complete(conn, lease, completion, now) {
            Ok(()) => out.push(Ok(())),
            Err(SqliteError::Core(e)) if e.is_lease_lost() => out.push(Err(e)),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Put unstarted claims back where they came from.
pub(crate) fn release(
    conn: &Connection,
    leases: &[Lease],
    delay: Duration,
    now: Timestamp,
) -> Result<ReleaseReport> {
    let mut report = ReleaseReport::default();
    for lease in leases {
        match settle(conn, lease, &lease.release(delay, now), None, now) {
            Ok(()) => report.released += 1,
            Err(SqliteError::Core(e)) if e.is_lease_lost() => report.lost += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(report)
}

/// Move a live claim's lease end to `now + by`.
pub(crate) fn extend(
    conn: &Connection,
    lease: &Lease,
    by: Duration,
    now: Timestamp,
) -> Result<Lease> {
    let until = now.saturating_add(by);
    let n = conn.prepare_cached(sql::EXTEND)?.execute(params![
        lease.delivery_id.to_string(),
        lease.tenant.as_str(),
        lease.token.to_string(),
        ms(until),
    ])?;
    if n == 0 {
        return Err(Error::lease_lost().into());
    }
    Ok(Lease {
        until,
        ..lease.clone()
    })
}

/// Turn a claimed e-mail delivery `sending`.
pub(crate) fn mark_sending(conn: &Connection, lease: &Lease, now: Timestamp) -> Result<()> {
    let n = conn.prepare_cached(sql::MARK_SENDING)?.execute(params![
        lease.delivery_id.to_string(),
        lease.tenant.as_str(),
        lease.token.to_string(),
        ms(now),
    ])?;
    if n == 0 {
        return Err(Error::lease_lost().into());
    }
    Ok(())
}
