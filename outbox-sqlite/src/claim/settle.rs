//! Settling claims on SQLite: complete (with the ledger's attempt and the endpoint's last
//! delivery), release, extend and mark sending, each fenced by the lease's token.

use super::*;

// ---- settling: complete, release ----

/// One claim to end: the row, its fence, what to write.
struct Settle<'a> {
    seq: i64,
    lease: &'a Lease,
    update: DeliveryUpdate,
    attempt: Option<&'a AttemptRecord>,
    /// The row as this store's claim left it, when it was: no fence `SELECT`.
    fence: Option<&'a Fence>,
}

/// Read a claimed row under its fence (token and tenant: a lease of another tenant matches
/// nothing), by rowid: what the settle writes beside it, and the attempt number so far.
const SETTLE_FENCE: &str = "SELECT kind, target, run, due_at, attempt_count \
     FROM outbox_deliveries \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?3 AND status IN ('processing', 'sending')";

/// Write one item's update under the same fence, by rowid. No `RETURNING`: SQLite buffers
/// returned rows in an ephemeral table that each call opens and closes, which cost more in
/// `perf` than reading the row first ([`SETTLE_FENCE`]; the page is then in the cache).
/// `?17`–`?19` fold the attempt into the row (schema 16: set only for a delivery that
/// finishes at its first attempt, see [`folds`]; NULL otherwise).
const SETTLE: &str = "UPDATE outbox_deliveries \
     SET status = ?4, attempts = ?5, snoozes = ?6, next_attempt_at = ?7, completed_at = ?8, \
         dead_reason = ?9, \
         last_outcome = CASE WHEN ?10 THEN ?11 ELSE last_outcome END, \
         last_status_code = CASE WHEN ?10 THEN ?12 ELSE last_status_code END, \
         last_excerpt = CASE WHEN ?10 THEN ?13 ELSE last_excerpt END, \
         last_at = CASE WHEN ?10 THEN ?14 ELSE last_at END, \
         claim_token = NULL, lease_until = NULL, claimed_from = NULL, updated_at = ?15, \
         attempt_count = attempt_count + ?16, \
         folded_started_at = ?17, folded_probe = ?18, folded_detail = ?19 \
     WHERE seq = ?1 AND claim_token = ?2 AND tenant = ?3 AND status IN ('processing', 'sending')";

/// Whether a settle that records an attempt numbered `number` keeps it in the delivery's row
/// instead of a ledger row: the delivery finishes (succeeded or dead) with its first attempt.
/// Its row then holds the whole attempt (the `last_*` columns are the attempt's record) and
/// changes again only by a replay, which moves the attempt to the ledger first
/// ([`crate::deliveries::replay`]).
fn folds(update: &DeliveryUpdate, number: i64) -> bool {
    number == 1 && update.status.is_finished()
}

/// Append an attempt as the delivery's `attempt_count`-th (counted by [`SETTLE`]).
const INSERT_ATTEMPT: &str = "INSERT INTO outbox_attempts \
     (delivery_seq, number, probe, started_at, finished_at, outcome, status_code, excerpt, \
      run, scheduled_at, detail) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

/// The endpoint's last delivery (written with the completion).
const ENDPOINT_LAST_DELIVERY: &str = "UPDATE outbox_endpoints \
     SET last_outcome = ?3, last_status_code = ?4, last_at = ?5 WHERE tenant = ?1 AND id = ?2";

const DISABLE_ENDPOINT_GONE: &str = "UPDATE outbox_endpoints \
     SET status = 'disabled', disabled_reason = 'gone', updated_at = ?3 \
     WHERE id = ?1 AND tenant = ?2";

/// What the settle writes beside a row: its endpoint (webhook rows), run, due time and the
/// number of the attempt it records.
struct Settled {
    webhook: Option<String>,
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
        let counted = i64::from(it.attempt.is_some());
        let settled: Option<Settled> = match it.fence {
            Some(f) => Some(Settled {
                webhook: f.webhook.clone(),
                run: f.run,
                due_at: Some(f.due_at),
                number: f.attempt_count + counted,
            }),
            None => fence
                .query_row(params![it.seq, token, it.lease.tenant.as_str()], |r| {
                    let kind: String = r.get(0)?;
                    Ok(Settled {
                        webhook: (kind == "webhook").then(|| r.get(1)).transpose()?,
                        run: r.get(2)?,
                        due_at: r.get(3)?,
                        number: r.get::<_, i64>(4)? + counted,
                    })
                })
                .optional()?,
        };
        let Some(s) = settled else {
            out.push(Err(Error::lease_lost()));
            continue;
        };
        let fold = it.attempt.filter(|_| folds(u, s.number));
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
            fold.map(|a| ms(a.started_at)),
            fold.map(|_| it.lease.is_probe()),
            fold.and_then(|a| a.detail.as_ref().map(|d| d.to_json())),
        ])?;
        if written == 0 && it.fence.is_some() {
            // Not read under the token in this transaction: the lease was lost since.
            out.push(Err(Error::lease_lost()));
            continue;
        }
        if written != 1 {
            // The fence held a moment ago in this transaction: nothing else can have moved.
            return Err(SqliteError::Corrupt("settle of a fenced row"));
        }
        out.push(Ok(()));
        if let Some(a) = it.attempt.filter(|_| fold.is_none()) {
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
                a.detail.as_ref().map(|d| d.to_json()),
            ])?;
        }
        if let Some(target) = s.webhook {
            if u.disable_endpoint {
                conn.prepare_cached(DISABLE_ENDPOINT_GONE)?
                    .execute(params![target, it.lease.tenant.as_str(), ms(now)])?;
            }
            if let Some(a) = it.attempt {
                last_per_endpoint.insert((it.lease.tenant.as_str(), target), a);
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
    fences: &[Option<Fence>],
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
            fence: fences.get(i).and_then(Option::as_ref),
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
    fences: &[Option<Fence>],
    delay: Duration,
    now: Timestamp,
) -> Result<ReleaseReport> {
    let mut report = ReleaseReport::default();
    let mut settles = Vec::with_capacity(leases.len());
    for (i, lease) in leases.iter().enumerate() {
        match seq_of(conn, lease)? {
            Some(seq) => settles.push(Settle {
                seq,
                lease,
                update: lease.release(delay, now),
                attempt: None,
                fence: fences.get(i).and_then(Option::as_ref),
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
