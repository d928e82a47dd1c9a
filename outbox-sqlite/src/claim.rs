//! The claim protocol on SQLite: claim, complete, release, extend, mark sending. Each runs
//! inside one `BEGIN IMMEDIATE` transaction on the writer connection, so claims are
//! exclusive across threads and processes.
//!
//! **Integer keys.** Rows are found by their integer `seq` (the rowid), never by the 36-byte
//! text id: a claim token carries its row's `seq` in its first six bytes (a version 8 UUID,
//! the other 74 bits random), so a completion finds its row without an index lookup and
//! the token still fences it (`claim_token` must match). A token that does not carry a
//! sequence (none is made today) is resolved by the delivery id.
//!
//! **Fair claiming.** A group is `(tenant, kind, target)`: a tenant's endpoint, consumer or
//! e-mail channel. The claim walks the groups that have unfinished rows through the
//! `outbox_deliveries_claim` index (one seek per group, reading only the group's head),
//! reads the first claimable rows of each due group, and fills the batch in rounds: the
//! first row of every group, then the second, …; within a round, groups in the order of
//! their oldest due row. A group's backlog is never scanned beyond what the batch can take.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use outboxkit_core::{
    AttemptRecord, ClaimRequest, ClaimToken, Claimed, Completion, DeliveryUpdate, Entropy, Error,
    Lease, Message, MessageId, ReleaseReport, Timestamp,
};
use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms, opt_ms};

/// The unfinished statuses (the rows of the claim index).
macro_rules! unfinished {
    () => {
        "('pending', 'held', 'processing', 'sending')"
    };
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|_| SqliteError::Corrupt("claim"))
}

// ---- tokens ----

/// The largest sequence a token can carry (six bytes).
const TOKEN_SEQ_MAX: i64 = (1 << 48) - 1;

/// A fresh token for the row `seq`: its sequence in bytes 0–5, random bits after.
fn token_for(seq: i64, random: &[u8]) -> ClaimToken {
    let mut b = [0u8; 16];
    b[6..].copy_from_slice(&random[..10]);
    if (0..=TOKEN_SEQ_MAX).contains(&seq) {
        b[..6].copy_from_slice(&seq.to_be_bytes()[2..]);
        ClaimToken::from_uuid(uuid::Builder::from_custom_bytes(b).into_uuid())
    } else {
        b[..6].copy_from_slice(&random[10..16]);
        ClaimToken::from_uuid(uuid::Builder::from_random_bytes(b).into_uuid())
    }
}

/// The row a token was made for, if it carries one.
fn seq_of_token(token: &ClaimToken) -> Option<i64> {
    let u = token.as_uuid();
    if u.get_version_num() != 8 {
        return None;
    }
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&u.as_bytes()[..6]);
    Some(i64::from_be_bytes(b))
}

const SEQ_BY_ID: &str = "SELECT seq FROM outbox_deliveries WHERE id = ?1";

/// The row of a lease: from its token, else by its delivery id. `None`: no such row.
fn seq_of(conn: &Connection, lease: &Lease) -> Result<Option<i64>> {
    if let Some(seq) = seq_of_token(&lease.token) {
        return Ok(Some(seq));
    }
    Ok(conn
        .prepare_cached(SEQ_BY_ID)?
        .query_row([lease.delivery_id.to_string()], |r| r.get(0))
        .optional()?)
}

// ---- claim ----

/// What one claim serves, in the forms its statements bind.
struct Served<'r> {
    request: &'r ClaimRequest,
    consumers: HashMap<&'r str, u32>,
    excluded_endpoints: HashSet<String>,
    /// Endpoints with a room of their own (the most of their rows one claim takes).
    rooms: HashMap<String, usize>,
    dormant: String,
}

impl<'r> Served<'r> {
    fn of(request: &'r ClaimRequest) -> Result<Self> {
        let topics = |set: &BTreeSet<outboxkit_core::Topic>| {
            json(&set.iter().map(|t| t.as_str()).collect::<Vec<_>>())
        };
        Ok(Served {
            request,
            consumers: request
                .consumers()
                .map(|(name, budget)| (name.as_str(), budget))
                .collect(),
            excluded_endpoints: request
                .excluded_endpoints()
                .iter()
                .map(|e| e.to_string())
                .collect(),
            rooms: request
                .endpoint_rooms()
                .iter()
                .map(|(e, n)| (e.to_string(), *n as usize))
                .collect(),
            dormant: topics(request.dormant())?,
        })
    }

    /// The most rows of a group one claim takes: an endpoint's room, else the claim's
    /// per-endpoint limit (`usize::MAX`: no limit).
    fn cap(&self, group: &Group) -> usize {
        if group.kind != "webhook" {
            return usize::MAX;
        }
        self.rooms
            .get(&group.target)
            .copied()
            .or(self.request.default_endpoint_limit().map(|n| n as usize))
            .unwrap_or(usize::MAX)
    }

    /// The attempt budget for a group, `None` when this claim does not take it (an
    /// excluded endpoint's group is not read at all: its rows stay exactly as they were).
    fn budget(&self, kind: &str, target: &str) -> Option<u32> {
        match kind {
            "handler" => self.consumers.get(target).copied(),
            "webhook" if self.excluded_endpoints.contains(target) => None,
            "webhook" => self.request.webhook_budget(),
            "email" => self.request.email_budget(),
            _ => None,
        }
    }
}

/// A `(tenant, kind, target)` group with due work.
struct Group {
    tenant: String,
    kind: String,
    target: String,
}

/// Due, served, non-held rows at or past their budget die as `max_attempts` (they are never
/// claimed). `+next_attempt_at` keeps the planner on the (nearly empty) `exhausted` index:
/// fresh rows are not in it, and claimed ones are above the smallest budget only when they
/// are about to be discarded.
const DISCARD_EXHAUSTED: &str = "UPDATE outbox_deliveries \
     SET status = 'dead', dead_reason = 'max_attempts', completed_at = :now, updated_at = :now, \
         claim_token = NULL, lease_until = NULL, claimed_from = NULL \
     WHERE attempts > 0 AND status IN ('pending', 'processing', 'sending') \
       AND attempts >= :min_budget \
       AND +next_attempt_at <= :now \
       AND ((kind = 'webhook' AND attempts >= :webhooks \
             AND target NOT IN (SELECT value FROM json_each(:excluded_endpoints))) \
         OR (kind = 'email' AND attempts >= :email) \
         OR (kind = 'handler' AND EXISTS (SELECT 1 FROM json_each(:consumers) AS j \
                                          WHERE j.key = target AND attempts >= j.value)))";

fn discard_exhausted(conn: &Connection, served: &Served<'_>, now: Timestamp) -> Result<()> {
    let request = served.request;
    let min_budget = request
        .consumers()
        .map(|(_, b)| b)
        .chain(request.webhook_budget())
        .chain(request.email_budget())
        .min()
        .unwrap_or(1);
    let consumers: BTreeMap<&str, u32> = served.consumers.iter().map(|(k, v)| (*k, *v)).collect();
    let excluded_endpoints: Vec<&str> = served
        .excluded_endpoints
        .iter()
        .map(String::as_str)
        .collect();
    conn.prepare_cached(DISCARD_EXHAUSTED)?
        .execute(named_params! {
            ":now": ms(now),
            ":min_budget": min_budget,
            ":excluded_endpoints": json(&excluded_endpoints)?,
            ":webhooks": request.webhook_budget(),
            ":email": request.email_budget(),
            ":consumers": json(&consumers)?,
        })?;
    Ok(())
}

/// The next group after `(tenant, kind, target)` with unfinished rows, and the due time of
/// its earliest row (a seek on the claim index).
const NEXT_GROUP: &str = concat!(
    "SELECT tenant, kind, target, next_attempt_at FROM outbox_deliveries \
     WHERE status IN ",
    unfinished!(),
    " AND (tenant, kind, target) > (?1, ?2, ?3) \
     ORDER BY tenant, kind, target, next_attempt_at, seq LIMIT 1"
);

/// Every group this claim serves whose earliest unfinished row is due.
fn due_groups(conn: &Connection, served: &Served<'_>, now: Timestamp) -> Result<Vec<Group>> {
    let mut stmt = conn.prepare_cached(NEXT_GROUP)?;
    let mut groups = Vec::new();
    let mut after = (String::new(), String::new(), String::new());
    loop {
        let next: Option<(String, String, String, i64)> = stmt
            .query_row(params![after.0, after.1, after.2], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((tenant, kind, target, head)) = next else {
            break;
        };
        if head <= ms(now) && served.budget(&kind, &target).is_some() {
            groups.push(Group {
                tenant: tenant.clone(),
                kind: kind.clone(),
                target: target.clone(),
            });
        }
        after = (tenant, kind, target);
    }
    Ok(groups)
}

/// A claimable row of a group.
#[derive(Clone, Copy)]
struct Candidate {
    seq: i64,
    due: i64,
}

/// A group's first `:limit` due rows not held back by the per-key ordering barrier, in
/// claim order.
const CANDIDATES: &str = concat!(
    "SELECT c.seq, c.next_attempt_at FROM outbox_deliveries AS c \
     WHERE c.tenant = :tenant AND c.kind = :kind AND c.target = :target \
       AND c.status IN ",
    unfinished!(),
    " AND c.next_attempt_at <= :now \
       AND (c.ordering_key IS NULL OR NOT EXISTS ( \
         SELECT 1 FROM outbox_deliveries AS b \
         WHERE b.tenant = c.tenant AND b.kind = c.kind AND b.target = c.target \
           AND b.ordering_key = c.ordering_key AND b.seq < c.seq \
           AND b.ordering_key IS NOT NULL AND b.status NOT IN ('succeeded', 'dead') \
           AND b.topic NOT IN (SELECT value FROM json_each(:dormant)))) \
     ORDER BY c.next_attempt_at, c.seq LIMIT :limit"
);

/// Up to `limit` claimable rows of `group` (and no more than its cap), in claim order.
fn candidates(
    conn: &Connection,
    served: &Served<'_>,
    group: &Group,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Candidate>> {
    let limit = limit.min(served.cap(group));
    let mut stmt = conn.prepare_cached(CANDIDATES)?;
    let rows = stmt.query_map(
        named_params! {
            ":tenant": group.tenant,
            ":kind": group.kind,
            ":target": group.target,
            ":now": ms(now),
            ":dormant": served.dormant,
            ":limit": limit as i64,
        },
        |r| {
            Ok(Candidate {
                seq: r.get(0)?,
                due: r.get(1)?,
            })
        },
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The batch in rounds over the groups (ARCHITECTURE "Claim order").
fn rounds(groups: &[Vec<Candidate>], batch: usize) -> Vec<i64> {
    let mut order: Vec<&Vec<Candidate>> = groups.iter().filter(|g| !g.is_empty()).collect();
    order.sort_by_key(|g| (g[0].due, g[0].seq));
    let mut picked = Vec::with_capacity(batch);
    for round in 0.. {
        let mut any = false;
        for g in &order {
            if let Some(c) = g.get(round) {
                any = true;
                picked.push(c.seq);
                if picked.len() == batch {
                    return picked;
                }
            }
        }
        if !any {
            break;
        }
    }
    picked
}

/// Lease the picked rows: token `n` (36 bytes each in `:tokens`, bound as a BLOB so
/// `substr` indexes bytes) goes to the `n`-th sequence of `:seqs`.
const LEASE: &str = concat!(
    "UPDATE outbox_deliveries AS d \
     SET claimed_from = d.status, due_at = d.next_attempt_at, \
         attempts = d.attempts + (d.status <> 'held'), \
         status = 'processing', \
         claim_token = CAST(substr(:tokens, j.key * 36 + 1, 36) AS TEXT), \
         lease_until = :until, next_attempt_at = :until, updated_at = :now \
     FROM json_each(:seqs) AS j WHERE d.seq = j.value \
     RETURNING ",
    delivery_cols!(),
    ", claimed_from, seq"
);

const MESSAGES_BY_IDS: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM outbox_messages WHERE id IN (SELECT value FROM json_each(?1))"
);

/// Lease up to `batch_size` claimable deliveries, fairly over the groups (see the module
/// docs), after the exhausted rows died. The request is validated by the caller.
pub(crate) fn claim(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    entropy: &dyn Entropy,
) -> Result<Vec<Claimed>> {
    let served = Served::of(request)?;
    let batch = request.batch_size() as usize;
    discard_exhausted(conn, &served, now)?;
    let groups = due_groups(conn, &served, now)?;
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    // First each group's fair share; more from the groups that had more only when the
    // others left room.
    let share = batch.div_ceil(groups.len());
    let mut heads = groups
        .iter()
        .map(|g| candidates(conn, &served, g, now, share))
        .collect::<Result<Vec<_>>>()?;
    let mut picked = rounds(&heads, batch);
    if picked.len() < batch && share < batch {
        for (g, h) in groups.iter().zip(heads.iter_mut()) {
            if h.len() == share && served.cap(g) > share {
                *h = candidates(conn, &served, g, now, batch)?;
            }
        }
        picked = rounds(&heads, batch);
    }
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    lease(conn, request, &picked, now, entropy)
}

fn lease(
    conn: &Connection,
    request: &ClaimRequest,
    picked: &[i64],
    now: Timestamp,
    entropy: &dyn Entropy,
) -> Result<Vec<Claimed>> {
    let mut random = vec![0u8; picked.len() * 16];
    entropy.fill(&mut random);
    let tokens: Vec<ClaimToken> = picked
        .iter()
        .zip(random.chunks_exact(16))
        .map(|(&seq, r)| token_for(seq, r))
        .collect();
    let mut token_bytes = Vec::with_capacity(picked.len() * 36);
    for t in &tokens {
        token_bytes.extend_from_slice(t.as_uuid().hyphenated().to_string().as_bytes());
    }
    let position: HashMap<i64, usize> = picked.iter().enumerate().map(|(i, &s)| (s, i)).collect();
    let until = now.saturating_add(request.lease());
    let mut stmt = conn.prepare_cached(LEASE)?;
    let mut rows = stmt.query(named_params! {
        ":now": ms(now),
        ":until": ms(until),
        ":tokens": token_bytes,
        ":seqs": json(picked)?,
    })?;
    let mut claimed = Vec::with_capacity(picked.len());
    while let Some(row) = rows.next()? {
        let delivery = rows::delivery(row)?;
        let claimed_from = rows::claimed_from(row, 21)?;
        let seq: i64 = row.get(22)?;
        let at = *position
            .get(&seq)
            .ok_or(SqliteError::Corrupt("claim of an unpicked row"))?;
        claimed.push((at, delivery, claimed_from));
    }
    drop(rows);
    drop(stmt);
    // RETURNING order is unspecified: back to claim order.
    claimed.sort_by_key(|(at, _, _)| *at);

    let mut ids: Vec<String> = claimed
        .iter()
        .map(|(_, d, _)| d.message_id.to_string())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut stmt = conn.prepare_cached(MESSAGES_BY_IDS)?;
    let messages: HashMap<MessageId, Message> =
        rows::collect(&mut stmt, [json(&ids)?], rows::message)?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();

    claimed
        .into_iter()
        .map(|(at, delivery, claimed_from)| {
            let message = messages
                .get(&delivery.message_id)
                .cloned()
                .ok_or(SqliteError::Corrupt("delivery without its message"))?;
            let lease = Lease {
                delivery_id: delivery.id,
                tenant: delivery.tenant.clone(),
                token: tokens[at],
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

// ---- settling: complete, release ----

/// One claim to end: the row, its fence, what to write.
struct Settle<'a> {
    seq: i64,
    lease: &'a Lease,
    update: DeliveryUpdate,
    attempt: Option<&'a AttemptRecord>,
}

/// Read a claimed row under its fence (token and tenant: a lease of another tenant matches
/// nothing), by rowid: what the settle writes beside it, and the attempt number so far.
const SETTLE_FENCE: &str = "SELECT kind, target, run, due_at, attempt_count \
     FROM outbox_deliveries \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?3 AND status IN ('processing', 'sending')";

/// Write one item's update under the same fence, by rowid. No `RETURNING`: SQLite buffers
/// returned rows in an ephemeral table that each call opens and closes, which cost more in
/// `perf` than reading the row first ([`SETTLE_FENCE`]; the page is then in the cache).
const SETTLE: &str = "UPDATE outbox_deliveries \
     SET status = ?4, attempts = ?5, snoozes = ?6, next_attempt_at = ?7, completed_at = ?8, \
         dead_reason = ?9, \
         last_outcome = CASE WHEN ?10 THEN ?11 ELSE last_outcome END, \
         last_status_code = CASE WHEN ?10 THEN ?12 ELSE last_status_code END, \
         last_excerpt = CASE WHEN ?10 THEN ?13 ELSE last_excerpt END, \
         last_at = CASE WHEN ?10 THEN ?14 ELSE last_at END, \
         claim_token = NULL, lease_until = NULL, claimed_from = NULL, updated_at = ?15, \
         attempt_count = attempt_count + ?16 \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?3 AND status IN ('processing', 'sending')";

/// Append an attempt as the delivery's `attempt_count`-th (counted by [`SETTLE`]).
const INSERT_ATTEMPT: &str = "INSERT INTO outbox_attempts \
     (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, \
      run, scheduled_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";

/// The endpoint's last delivery (written with the completion).
const ENDPOINT_LAST_DELIVERY: &str = "UPDATE outbox_endpoints \
     SET last_outcome = ?3, last_status_code = ?4, last_at = ?5 WHERE tenant = ?1 AND id = ?2";

const DISABLE_ENDPOINT_GONE: &str = "UPDATE outbox_endpoints \
     SET status = 'disabled', disabled_reason = 'gone', updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2";

/// What the settle statement returned for a row it changed.
struct Settled {
    kind: String,
    target: String,
    run: i64,
    due_at: Option<i64>,
    number: i64,
}

/// Write each item under its fence: `Ok` per item whose fence held, `LeaseLost` for the
/// others; append the attempts, the endpoints' last deliveries and `gone` disables of the
/// items that were written. One prepared statement per row, by rowid, all in the caller's
/// transaction (measured faster than one `UPDATE … FROM json_each` of the whole batch, whose
/// JSON decoding cost more than the statements it saved).
fn settle_many(
    conn: &Connection,
    items: &[Settle<'_>],
    now: Timestamp,
) -> Result<Vec<outboxkit_core::Result<()>>> {
    let mut fence = conn.prepare_cached(SETTLE_FENCE)?;
    let mut settle = conn.prepare_cached(SETTLE)?;
    let mut insert_attempt = conn.prepare_cached(INSERT_ATTEMPT)?;
    let mut last_per_endpoint: HashMap<(&str, String), &AttemptRecord> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let u = &it.update;
        let last = u.last_outcome.as_ref();
        let token = it.lease.token.to_string();
        let settled: Option<Settled> = fence
            .query_row(params![it.seq, token, it.lease.tenant.as_str()], |r| {
                Ok(Settled {
                    kind: r.get(0)?,
                    target: r.get(1)?,
                    run: r.get(2)?,
                    due_at: r.get(3)?,
                    number: r.get::<_, i64>(4)? + i64::from(it.attempt.is_some()),
                })
            })
            .optional()?;
        let Some(s) = settled else {
            out.push(Err(Error::lease_lost()));
            continue;
        };
        let written = settle.execute(params![
            it.seq,
            token,
            it.lease.tenant.as_str(),
            u.status.as_str(),
            u.attempts,
            u.snoozes,
            ms(u.next_attempt_at),
            opt_ms(u.completed_at),
            u.dead_reason.map(|r| r.as_str()),
            last.is_some(),
            last.map(|l| l.outcome.as_str()),
            last.and_then(|l| l.status_code),
            last.and_then(|l| l.excerpt.as_deref()),
            last.map(|l| ms(l.at)),
            ms(now),
            it.attempt.is_some(),
        ])?;
        if written != 1 {
            // The fence held a moment ago in this transaction: nothing else can have moved.
            return Err(SqliteError::Corrupt("settle of a fenced row"));
        }
        out.push(Ok(()));
        if let Some(a) = it.attempt {
            insert_attempt.execute(params![
                it.seq,
                s.number,
                it.lease.is_probe(),
                ms(a.started_at),
                ms(a.finished_at),
                a.outcome.as_str(),
                a.status_code,
                a.excerpt.as_deref(),
                s.run,
                s.due_at,
            ])?;
        }
        if s.kind == "webhook" {
            if let Some(a) = it.attempt {
                last_per_endpoint.insert((it.lease.tenant.as_str(), s.target.clone()), a);
            }
            if u.disable_endpoint {
                conn.prepare_cached(DISABLE_ENDPOINT_GONE)?
                    .execute(params![s.target, it.lease.tenant.as_str(), ms(now)])?;
            }
        }
    }
    for ((tenant, endpoint), a) in last_per_endpoint {
        conn.prepare_cached(ENDPOINT_LAST_DELIVERY)?
            .execute(params![
                tenant,
                endpoint,
                a.outcome.as_str(),
                a.status_code,
                ms(a.finished_at),
            ])?;
    }
    Ok(out)
}

/// The status of a webhook delivery's endpoint: `None` without a row, `Some(None)` when the
/// endpoint is gone.
const ENDPOINT_STATUS_OF_DELIVERY: &str = "SELECT e.status FROM outbox_deliveries AS d \
     LEFT JOIN outbox_endpoints AS e ON e.id = d.target AND e.tenant = d.tenant \
     WHERE d.seq = ?1";

/// End claims with verdicts in one transaction: a lost lease is that item's `LeaseLost`;
/// any other failure aborts the whole call (nothing is written).
pub(crate) fn complete_many(
    conn: &Connection,
    items: &[(Lease, Completion)],
    now: Timestamp,
) -> Result<Vec<outboxkit_core::Result<()>>> {
    let mut settles = Vec::with_capacity(items.len());
    let mut lost = Vec::new();
    for (i, (lease, completion)) in items.iter().enumerate() {
        let Some(seq) = seq_of(conn, lease)? else {
            lost.push(i);
            continue;
        };
        let mut update = lease.settle(&completion.verdict, completion.attempt.as_ref(), now);
        if update.awaits_endpoint {
            // The endpoint may have been resumed or deleted while the delivery was claimed.
            let status: Option<Option<String>> = conn
                .prepare_cached(ENDPOINT_STATUS_OF_DELIVERY)?
                .query_row([seq], |r| r.get(0))
                .optional()?;
            if matches!(status, Some(None)) || matches!(status, Some(Some(ref s)) if s == "active")
            {
                update.endpoint_is_back(now);
            }
        }
        settles.push(Settle {
            seq,
            lease,
            update,
            attempt: completion.attempt.as_ref(),
        });
    }
    let mut written = settle_many(conn, &settles, now)?.into_iter();
    Ok((0..items.len())
        .map(|i| {
            if lost.contains(&i) {
                Err(Error::lease_lost())
            } else {
                written.next().unwrap_or_else(|| Err(Error::lease_lost()))
            }
        })
        .collect())
}

/// Put unstarted claims back where they came from.
pub(crate) fn release(
    conn: &Connection,
    leases: &[Lease],
    delay: Duration,
    now: Timestamp,
) -> Result<ReleaseReport> {
    let mut report = ReleaseReport::default();
    let mut settles = Vec::with_capacity(leases.len());
    for lease in leases {
        match seq_of(conn, lease)? {
            Some(seq) => settles.push(Settle {
                seq,
                lease,
                update: lease.release(delay, now),
                attempt: None,
            }),
            None => report.lost += 1,
        }
    }
    for r in settle_many(conn, &settles, now)? {
        match r {
            Ok(()) => report.released += 1,
            Err(_) => report.lost += 1,
        }
    }
    Ok(report)
}

// ---- extend, mark sending ----

const EXTEND: &str = "UPDATE outbox_deliveries \
     SET lease_until = ?3, next_attempt_at = ?3 \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?4 AND status IN ('processing', 'sending')";

/// Move a live claim's lease end to `now + by`.
pub(crate) fn extend(
    conn: &Connection,
    lease: &Lease,
    by: Duration,
    now: Timestamp,
) -> Result<Lease> {
    let until = now.saturating_add(by);
    let Some(seq) = seq_of(conn, lease)? else {
        return Err(Error::lease_lost().into());
    };
    let n = conn.prepare_cached(EXTEND)?.execute(params![
        seq,
        lease.token.to_string(),
        ms(until),
        lease.tenant.as_str(),
    ])?;
    if n == 0 {
        return Err(Error::lease_lost().into());
    }
    Ok(Lease {
        until,
        ..lease.clone()
    })
}

const MARK_SENDING: &str = "UPDATE outbox_deliveries \
     SET status = 'sending', updated_at = ?3 \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?4 AND status IN ('processing', 'sending')";

/// Turn a claimed e-mail delivery `sending`.
pub(crate) fn mark_sending(conn: &Connection, lease: &Lease, now: Timestamp) -> Result<()> {
    let Some(seq) = seq_of(conn, lease)? else {
        return Err(Error::lease_lost().into());
    };
    let n = conn.prepare_cached(MARK_SENDING)?.execute(params![
        seq,
        lease.token.to_string(),
        ms(now),
        lease.tenant.as_str(),
    ])?;
    if n == 0 {
        return Err(Error::lease_lost().into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_carry_their_row() {
        let random: Vec<u8> = (0..16).collect();
        for seq in [0, 1, 255, 1 << 40, TOKEN_SEQ_MAX] {
            let t = token_for(seq, &random);
            assert_eq!(seq_of_token(&t), Some(seq));
            assert_eq!(t.as_uuid().get_version_num(), 8);
        }
        let t = token_for(TOKEN_SEQ_MAX + 1, &random);
        assert_eq!(
            seq_of_token(&t),
            None,
            "too large: a random token, found by id"
        );
        let other = ClaimToken::from_uuid(uuid::Builder::from_random_bytes([7; 16]).into_uuid());
        assert_eq!(seq_of_token(&other), None);
    }
}
