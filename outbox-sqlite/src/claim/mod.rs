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
//! e-mail channel, known by its integer id (`grp`, see `groups`). The claim walks the
//! groups that have unfinished rows through the `outbox_deliveries_claim` index, keyed by
//! `grp` (one seek per group, reading only the group's head), reads the first claimable
//! rows of each due group, and fills the batch in rounds: the first row of every group,
//! then the second, …; within a round, groups in the order of their oldest due row. A group's backlog is never scanned beyond what the batch can take.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use outboxkit_core::claim_rules::{fair_order, EXHAUSTED_PER_CLAIM};
use outboxkit_core::{
    AttemptRecord, ClaimRequest, ClaimToken, Claimed, Completion, DeliveryUpdate, Destination,
    DestinationKind, Entropy, Error, Lease, Message, MessageId, ReleaseReport, Timestamp,
};
use rusqlite::{named_params, params, Connection, OptionalExtension};

use crate::error::{Result, SqliteError};
use crate::rows::{self, ms, opt_ms};

/// The unfinished statuses (the rows of the claim index), as its predicate spells them: a
/// list of two, which SQLite tests by comparisons (a constant list of three or more is
/// built into an ephemeral table on every run of the statement).
macro_rules! unfinished {
    () => {
        "NOT IN ('succeeded', 'dead')"
    };
}

mod fences;
mod settle;

pub(crate) use fences::{Fence, Fences};
pub(crate) use settle::{complete_many, extend, mark_sending, release};

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

/// A group with due work: its id (`grp`) and its destination (the tenant is its rows').
struct Group {
    id: i64,
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
     WHERE seq IN (SELECT seq FROM outbox_deliveries \
     WHERE attempts > 0 AND status <> 'held' AND status NOT IN ('succeeded', 'dead') \
       AND attempts >= :min_budget \
       AND +next_attempt_at <= :now \
       AND ((kind = 'webhook' AND attempts >= :webhooks \
             AND target NOT IN (SELECT value FROM json_each(:excluded_endpoints))) \
         OR (kind = 'email' AND attempts >= :email) \
         OR (kind = 'handler' AND EXISTS (SELECT 1 FROM json_each(:consumers) AS j \
                                          WHERE j.key = target AND attempts >= j.value))) \
     LIMIT :bound)";

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
            ":bound": EXHAUSTED_PER_CLAIM as i64,
        })?;
    Ok(())
}

/// The next group after `?1` (by id) with unfinished rows, its key and the due time of its
/// earliest row: one seek on the claim index, one on the groups' rowid.
const NEXT_GROUP: &str = concat!(
    "SELECT d.grp, g.kind, g.target, d.next_attempt_at \
     FROM (SELECT grp, next_attempt_at FROM outbox_deliveries \
       WHERE status ",
    unfinished!(),
    " AND grp > ?1 ORDER BY grp, next_attempt_at, seq LIMIT 1) AS d \
     JOIN outbox_groups AS g ON g.id = d.grp"
);

/// Every group this claim serves whose earliest unfinished row is due.
fn due_groups(conn: &Connection, served: &Served<'_>, now: Timestamp) -> Result<Vec<Group>> {
    let mut stmt = conn.prepare_cached(NEXT_GROUP)?;
    let mut groups = Vec::new();
    let mut after = i64::MIN;
    loop {
        let next: Option<(i64, String, String, i64)> = stmt
            .query_row(params![after], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()?;
        let Some((id, kind, target, head)) = next else {
            break;
        };
        if head <= ms(now) && served.budget(&kind, &target).is_some() {
            groups.push(Group { id, kind, target });
        }
        after = id;
    }
    Ok(groups)
}

/// A claimable row of a group.
#[derive(Clone, Copy)]
struct Candidate {
    seq: i64,
    due: i64,
    run: i64,
    attempt_count: i64,
}

/// A group's first `:limit` due rows within their budget (core's `is_exhausted`: rows past
/// it beyond the exhausted bound wait for the next claim to kill them) and not held back by
/// the per-key ordering barrier (the `barrier` column: the key, or a FIFO endpoint's one slot),
/// in claim order. Each row as the lease will leave it, in the
/// columns `rows::leased` reads (the attempts counted, the status it is claimed from), and
/// its due time: the lease statement then returns nothing (`RETURNING` buffered every row in
/// an ephemeral table and read each again).
const CANDIDATES: &str = concat!(
    "SELECT c.seq, c.id, c.message_id, c.attempts + (c.status <> 'held'), c.snoozes, c.run, \
            c.last_outcome, c.last_status_code, c.last_excerpt, c.last_at, c.dead_reason, \
            c.completed_at, c.status, c.next_attempt_at, c.attempt_count \
     FROM outbox_deliveries AS c \
     WHERE c.grp = :grp \
       AND c.status ",
    unfinished!(),
    " AND c.next_attempt_at <= :now \
       AND (c.status = 'held' OR c.attempts < :budget) \
       AND (c.barrier IS NULL OR NOT EXISTS ( \
         SELECT 1 FROM outbox_deliveries AS b \
         WHERE b.grp = c.grp AND b.barrier = c.barrier AND b.seq < c.seq \
           AND b.barrier IS NOT NULL AND b.status NOT IN ('succeeded', 'dead') \
           AND b.topic NOT IN (SELECT value FROM json_each(:dormant)))) \
     ORDER BY c.next_attempt_at, c.seq LIMIT :limit"
);

/// Up to `limit` claimable rows of `group` (and no more than its cap), in claim order; each
/// row's leased form goes into `read`.
fn candidates(
    conn: &Connection,
    served: &Served<'_>,
    group: &Group,
    now: Timestamp,
    limit: usize,
    read: &mut HashMap<i64, (rows::Leased, Candidate)>,
) -> Result<Vec<Candidate>> {
    let limit = limit.min(served.cap(group));
    let mut stmt = conn.prepare_cached(CANDIDATES)?;
    let mut rows = stmt.query(named_params! {
        ":grp": group.id,
        ":now": ms(now),
        ":dormant": served.dormant,
        ":budget": served.budget(&group.kind, &group.target),
        ":limit": limit as i64,
    })?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let c = Candidate {
            seq: row.get(0)?,
            due: row.get(13)?,
            run: row.get(5)?,
            attempt_count: row.get(14)?,
        };
        read.insert(c.seq, (rows::leased(row)?, c));
        out.push(c);
    }
    Ok(out)
}

/// The batch in rounds over the groups: core's `fair_order`, each group keyed by its first
/// claimable row.
fn rounds(groups: &[Vec<Candidate>], batch: usize) -> Vec<i64> {
    let heads = groups
        .iter()
        .filter_map(|g| {
            let first = g.first()?;
            Some(((first.due, first.seq), g.iter().map(|c| c.seq).collect()))
        })
        .collect();
    fair_order(heads, batch)
}

/// Lease the picked rows: token `n` (36 bytes each in `:tokens`, bound as a BLOB so
/// `substr` indexes bytes) goes to the `n`-th sequence of `:seqs`. It returns nothing: the
/// candidates statement read each row as this leaves it (in this transaction), a claimed
/// delivery's tenant, topic, ordering key and created_at are its message's, its destination
/// its group's, its status, lease and updated_at the claim's own.
const LEASE: &str = "UPDATE outbox_deliveries AS d \
     SET claimed_from = d.status, due_at = d.next_attempt_at, \
         attempts = d.attempts + (d.status <> 'held'), \
         status = 'processing', \
         claim_token = CAST(substr(:tokens, j.key * 36 + 1, 36) AS TEXT), \
         lease_until = :until, next_attempt_at = :until, updated_at = :now \
     FROM json_each(:seqs) AS j WHERE d.seq = j.value";

/// The messages of `?1` (a JSON array of distinct ids): one seek each, in the list's order
/// (`id IN (SELECT …)` first built the list into an ephemeral index). The list is wrapped in
/// a subquery so that `id` names the message's column, not `json_each`'s.
const MESSAGES_BY_IDS: &str = concat!(
    "SELECT ",
    message_cols!(),
    " FROM (SELECT value AS wanted FROM json_each(?1)) CROSS JOIN outbox_messages ON id = wanted"
);

/// Lease up to `batch_size` claimable deliveries, fairly over the groups (see the module
/// docs), after the exhausted rows died, with the fence of each (for [`Fences`], once the
/// claim is committed). The request is validated by the caller.
pub(crate) fn claim(
    conn: &Connection,
    request: &ClaimRequest,
    now: Timestamp,
    entropy: &dyn Entropy,
) -> Result<(Vec<Claimed>, Vec<Fence>)> {
    let served = Served::of(request)?;
    let batch = request.batch_size() as usize;
    discard_exhausted(conn, &served, now)?;
    let groups = due_groups(conn, &served, now)?;
    if groups.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    // First each group's fair share; more from the groups that had more only when the
    // others left room.
    let share = batch.div_ceil(groups.len());
    let mut read = HashMap::new();
    let mut heads = groups
        .iter()
        .map(|g| candidates(conn, &served, g, now, share, &mut read))
        .collect::<Result<Vec<_>>>()?;
    let mut picked = rounds(&heads, batch);
    if picked.len() < batch && share < batch {
        for (g, h) in groups.iter().zip(heads.iter_mut()) {
            if h.len() == share && served.cap(g) > share {
                *h = candidates(conn, &served, g, now, batch, &mut read)?;
            }
        }
        picked = rounds(&heads, batch);
    }
    if picked.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let group_of: HashMap<i64, usize> = heads
        .iter()
        .enumerate()
        .flat_map(|(g, h)| h.iter().map(move |c| (c.seq, g)))
        .collect();
    let destinations = groups
        .iter()
        .map(|g| {
            Destination::from_parts(&g.kind, &g.target)
                .map_err(|_| SqliteError::Corrupt("delivery"))
        })
        .collect::<Result<Vec<_>>>()?;
    let picked: Vec<(i64, &Destination)> = picked
        .iter()
        .map(|seq| {
            let g = *group_of
                .get(seq)
                .ok_or(SqliteError::Corrupt("claim of an unpicked row"))?;
            Ok((*seq, &destinations[g]))
        })
        .collect::<Result<_>>()?;
    lease(conn, request, &picked, read, now, entropy)
}

fn lease(
    conn: &Connection,
    request: &ClaimRequest,
    picked: &[(i64, &Destination)],
    mut read: HashMap<i64, (rows::Leased, Candidate)>,
    now: Timestamp,
    entropy: &dyn Entropy,
) -> Result<(Vec<Claimed>, Vec<Fence>)> {
    let mut random = vec![0u8; picked.len() * 16];
    entropy.fill(&mut random);
    let tokens: Vec<ClaimToken> = picked
        .iter()
        .zip(random.chunks_exact(16))
        .map(|(&(seq, _), r)| token_for(seq, r))
        .collect();
    let mut token_bytes = Vec::with_capacity(picked.len() * 36);
    for t in &tokens {
        token_bytes.extend_from_slice(t.as_uuid().hyphenated().to_string().as_bytes());
    }
    let seqs: Vec<i64> = picked.iter().map(|&(s, _)| s).collect();
    let until = now.saturating_add(request.lease());
    let written = conn.prepare_cached(LEASE)?.execute(named_params! {
        ":now": ms(now),
        ":until": ms(until),
        ":tokens": token_bytes,
        ":seqs": json(&seqs)?,
    })?;
    if written != picked.len() {
        // Read by the candidates statement in this transaction: nothing else can have moved.
        return Err(SqliteError::Corrupt("lease of a picked row"));
    }
    let mut fences = Vec::with_capacity(picked.len());
    let leased = seqs
        .iter()
        .enumerate()
        .map(|(at, seq)| {
            let (l, c) = read
                .remove(seq)
                .ok_or(SqliteError::Corrupt("claim of an unread row"))?;
            let destination = picked[at].1;
            fences.push(Fence {
                seq: *seq,
                token: tokens[at],
                webhook: (destination.kind() == DestinationKind::Webhook)
                    .then(|| destination.target()),
                run: c.run,
                due_at: c.due,
                attempt_count: c.attempt_count,
            });
            Ok((at, l))
        })
        .collect::<Result<Vec<_>>>()?;

    let mut ids: Vec<String> = leased
        .iter()
        .map(|(_, l)| l.message_id.to_string())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut stmt = conn.prepare_cached(MESSAGES_BY_IDS)?;
    let mut messages: HashMap<MessageId, Message> =
        rows::collect(&mut stmt, [json(&ids)?], rows::message)?
            .into_iter()
            .map(|m| (m.id, m))
            .collect();
    // A message goes to its last claimed delivery as it is (the common case: one delivery),
    // to the others as a copy.
    let mut uses: HashMap<MessageId, usize> = HashMap::with_capacity(messages.len());
    for (_, l) in &leased {
        *uses.entry(l.message_id).or_default() += 1;
    }

    leased
        .into_iter()
        .map(|(at, l)| {
            let left = uses
                .get_mut(&l.message_id)
                .ok_or(SqliteError::Corrupt("delivery without its message"))?;
            *left -= 1;
            let message = if *left == 0 {
                messages.remove(&l.message_id)
            } else {
                messages.get(&l.message_id).cloned()
            }
            .ok_or(SqliteError::Corrupt("delivery without its message"))?;
            let claimed_from = l.claimed_from;
            let delivery = l.delivery(&message, picked[at].1.clone(), until, now);
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
        .collect::<Result<Vec<_>>>()
        .map(|claimed| (claimed, fences))
}

#[cfg(test)]
mod tests;
