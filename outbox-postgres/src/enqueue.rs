//! `MessageStore`: a message and its fan-out deliveries in one statement, alone or in
//! batches, in the caller's transaction or in the store's own.
//!
//! Fan-out happens at enqueue, inside the statement: one delivery to every consumer whose
//! filter matches the topic, to every endpoint of the message's tenant whose filter matches
//! (held when the endpoint is paused or disabled), and to every e-mail recipient, numbered in
//! that order and given ids derived from one random UUIDv7 base per message.

use std::collections::{BTreeSet, HashMap};

use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::{
    fanout, DeliveryId, Enqueued, Error, ErrorKind, MessageId, NewMessage, Result, Timestamp,
    ValidMessage,
};
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use crate::error::DbResult;
use crate::rows::{self, get, ms, MESSAGE_COLS};
use crate::schema::Tables;
use crate::store::PostgresStore;
use async_trait::async_trait;
use outboxkit_core::MessageStore;

/// The enqueue statements of one store.
#[derive(Debug)]
pub(crate) struct Sql {
    one: String,
    many: String,
    find_idempotent: String,
}

impl Sql {
    pub fn new(t: &Tables) -> Self {
        Sql {
            one: one_text(t),
            many: many_text(t),
            find_idempotent: format!(
                "SELECT id FROM {m} WHERE tenant = $1::text AND topic = $2::text \
                    AND idempotency_key = $3::text",
                m = t.messages
            ),
        }
    }
}

/// Whether `topic` matches any pattern of the `patterns` array: `*`, the exact topic, or
/// `prefix.*` for any deeper topic (the semantics of `TopicPattern::matches`).
fn topic_matches(patterns: &str, topic: &str) -> String {
    format!(
        "('*' = ANY({patterns}) OR {topic} = ANY({patterns}) OR EXISTS (\
            SELECT 1 FROM unnest({patterns}) AS fp(p) \
            WHERE right(fp.p, 2) = '.*' AND length({topic}) > length(fp.p) - 1 \
              AND starts_with({topic}, left(fp.p, -1))))"
    )
}

/// A delivery id derived from a random UUIDv7 base (`hi` = its first 8 bytes, `lo` = the
/// last 8 as a bigint) and the delivery's 1-based position `n` in its message's fan-out:
/// the low bits are XORed with `n`, keeping the version, variant and timestamp.
fn derive_id(hi: &str, lo: &str, n: &str) -> String {
    format!("encode({hi} || int8send({lo} # {n}), 'hex')::uuid")
}

/// Until when a new delivery to the endpoint aliased `e` waits, written at `now`
/// (`EndpointStatus::hold_until`): NULL when active, `Timestamp::MAX` when paused, `now +
/// DISABLED_HOLD` when disabled.
fn endpoint_hold(e: &str, now: &str) -> String {
    format!(
        "(CASE {e}.status WHEN 'paused' THEN {never}::int8 \
                          WHEN 'disabled' THEN {now} + {hold}::int8 END)",
        never = Timestamp::MAX.as_unix_millis(),
        hold = DISABLED_HOLD.as_millis(),
    )
}

/// One message ready to write: validated, with its id and the base of its delivery ids.
struct Prepared {
    valid: ValidMessage,
    id: MessageId,
    base: Uuid,
}

/// The statement of one message. Parameters, bound in this order by [`PostgresStore::write_one`]:
/// $1 id, $2 tenant, $3 topic, $4 payload, $5 ordering key, $6 idempotency key,
/// $7 available at, $8 headers, $9 cause, $10 now, $11/$12 delivery id base (hi, lo),
/// $13 e-mail recipients, $14 NOTIFY channel (NULL: none).
fn one_text(t: &Tables) -> String {
    let (m, d, e, c) = (&t.messages, &t.deliveries, &t.endpoints, &t.consumers);
    format!(
        "WITH ins AS ( \
           INSERT INTO {m} ({MESSAGE_COLS}) \
           VALUES ($1::uuid, $2::text, $3::text, $4::bytea, $5::text, $6::text, $7::int8, \
                   $8::text, $9::text, $10::int8) \
           ON CONFLICT DO NOTHING RETURNING id), \
         dest AS ( \
           SELECT 0 AS grp, 0::int8 AS k1, c.name AS k2, 'handler' AS kind, c.name AS target, \
                  NULL::int8 AS hold \
             FROM {c} c WHERE {cm} \
           UNION ALL \
           SELECT 1, e.created_at, e.id::text, 'webhook', e.id::text, {hold} \
             FROM {e} e WHERE e.tenant = $2::text AND {em} \
           UNION ALL \
           SELECT 2, r.ord, '', 'email', r.rcpt, NULL::int8 \
             FROM unnest($13::text[]) WITH ORDINALITY AS r(rcpt, ord)), \
         nd AS ( \
           INSERT INTO {d} (id, message_id, tenant, topic, ordering_key, kind, target, status, \
                            next_attempt_at, created_at, updated_at) \
           SELECT {did}, ins.id, $2::text, $3::text, $5::text, dest.kind, dest.target, \
                  CASE WHEN dest.hold IS NULL THEN 'pending' ELSE 'held' END, \
                  coalesce(dest.hold, $7::int8), $10::int8, $10::int8 \
             FROM ins CROSS JOIN dest \
            ORDER BY dest.grp, dest.k1, dest.k2 \
           RETURNING 1), \
         n AS (SELECT count(*) AS n FROM nd) \
         SELECT (SELECT id FROM ins) AS inserted, n.n AS deliveries, \
                CASE WHEN NOT EXISTS (SELECT 1 FROM ins) THEN \
                  (SELECT x.id FROM {m} x WHERE x.tenant = $2::text AND x.topic = $3::text \
                      AND x.idempotency_key = $6::text) END AS existing, \
                CASE WHEN n.n > 0 AND $14::text IS NOT NULL \
                  THEN pg_notify($14::text, '')::text END AS notified \
           FROM n",
        cm = topic_matches("c.filter", "$3::text"),
        em = topic_matches("e.filter", "$3::text"),
        hold = endpoint_hold("e", "$10::int8"),
        did = derive_id(
            "$11::bytea",
            "$12::int8",
            "row_number() OVER (ORDER BY dest.grp, dest.k1, dest.k2)"
        ),
    )
}

/// What the statement of one message reports.
struct Written {
    inserted: bool,
    deliveries: i64,
    existing: Option<Uuid>,
}

impl PostgresStore {
    fn prepare(&self, message: NewMessage) -> Result<Prepared> {
        let now = self.inner.clock.now();
        let valid = message.validate(&self.inner.config.limits, now)?;
        let row = fanout::message_row(&valid, now, &*self.inner.entropy);
        let base = DeliveryId::generate(now, &*self.inner.entropy).as_uuid();
        Ok(Prepared {
            valid,
            id: row.id,
            base,
        })
    }

    /// Run [`one_text`] for `p` on `conn`.
    async fn write_one(
        &self,
        conn: &mut PgConnection,
        p: &Prepared,
        channel: Option<&str>,
    ) -> Result<Written> {
        let v = &p.valid;
        let (hi, lo) = rows::split_base(p.base);
        let emails: Vec<&str> = v.emails.iter().map(|r| r.as_str()).collect();
        let row = sqlx::query(&self.inner.sql.enqueue.one)
            .bind(p.id.as_uuid()) // $1
            .bind(v.tenant.as_str()) // $2
            .bind(v.topic.as_str()) // $3
            .bind(&v.payload) // $4
            .bind(v.ordering_key.as_ref().map(|k| k.as_str())) // $5
            .bind(v.idempotency_key.as_ref().map(|k| k.as_str())) // $6
            .bind(ms(v.available_at)) // $7
            .bind(rows::headers_to(&v.headers)) // $8
            .bind(rows::cause_to(v.cause.as_ref())) // $9
            .bind(ms(self.inner.clock.now())) // $10
            .bind(hi) // $11
            .bind(lo) // $12
            .bind(emails) // $13
            .bind(channel) // $14
            .fetch_one(&mut *conn)
            .await
            .db()?;
        Ok(Written {
            inserted: get::<Option<Uuid>>(&row, "inserted")?.is_some(),
            deliveries: get(&row, "deliveries")?,
            existing: get(&row, "existing")?,
        })
    }

    /// Enqueue on `conn`, with a `NOTIFY` on `channel` inside the statement when given.
    pub(crate) async fn enqueue_on(
        &self,
        conn: &mut PgConnection,
        message: NewMessage,
        channel: Option<&str>,
    ) -> Result<Enqueued> {
        let p = self.prepare(message)?;
        let w = self.write_one(conn, &p, channel).await?;
        self.outcome(conn, &p, w).await
    }

    /// The result for `p` from what its statement reported.
    async fn outcome(&self, conn: &mut PgConnection, p: &Prepared, w: Written) -> Result<Enqueued> {
        if w.inserted {
            return Ok(Enqueued {
                message_id: p.id,
                deliveries: u32::try_from(w.deliveries).unwrap_or(u32::MAX),
                duplicate: false,
            });
        }
        let existing = match w.existing {
            Some(id) => id,
            None => self.find_duplicate(conn, &p.valid).await?,
        };
        duplicate_of(existing)
    }

    /// The earlier message with `v`'s idempotency key, read with a fresh snapshot: the row
    /// that made `ON CONFLICT DO NOTHING` skip may have committed after the statement began.
    async fn find_duplicate(&self, conn: &mut PgConnection, v: &ValidMessage) -> Result<Uuid> {
        let Some(key) = &v.idempotency_key else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a new message id collided with a stored one",
            ));
        };
        let id: Option<Uuid> = sqlx::query_scalar(&self.inner.sql.enqueue.find_idempotent)
            .bind(v.tenant.as_str()) // $1
            .bind(v.topic.as_str()) // $2
            .bind(key.as_str()) // $3
            .fetch_optional(&mut *conn)
            .await
            .db()?;
        id.ok_or_else(|| {
            Error::new(
                ErrorKind::Conflict,
                "the idempotency key is held by a message that was removed meanwhile; try again",
            )
        })
    }
}

fn duplicate_of(existing: Uuid) -> Result<Enqueued> {
    Ok(Enqueued {
        message_id: MessageId::from_uuid(existing).map_err(|e| {
            Error::new(ErrorKind::Unexpected, "a stored id is not valid").with_source(e)
        })?,
        deliveries: 0,
        duplicate: true,
    })
}

/// Which messages of a batch are written: a repeated (tenant, topic, idempotency key) refers
/// to its first occurrence in the batch and is not sent.
struct BatchPlan {
    /// Per message: the index of the earlier message it repeats.
    earlier: Vec<Option<usize>>,
    /// The indexes of the messages sent, in order.
    sent: Vec<usize>,
}

impl BatchPlan {
    fn new(prepared: &[Prepared]) -> Self {
        let mut first: HashMap<(&str, &str, &str), usize> = HashMap::new();
        let mut earlier = Vec::with_capacity(prepared.len());
        let mut sent = Vec::with_capacity(prepared.len());
        for (i, p) in prepared.iter().enumerate() {
            let v = &p.valid;
            let dup = v.idempotency_key.as_ref().and_then(|k| {
                let key = (v.tenant.as_str(), v.topic.as_str(), k.as_str());
                match first.get(&key) {
                    Some(&j) => Some(j),
                    None => {
                        first.insert(key, i);
                        None
                    }
                }
            });
            if dup.is_none() {
                sent.push(i);
            }
            earlier.push(dup);
        }
        BatchPlan { earlier, sent }
    }
}

/// The statement of a batch: `unnest` arrays, constant text whatever the batch size.
/// Parameters, bound in this order by [`PostgresStore::write_batch`]: $1 ids, $2 tenants,
/// $3 topics, $4 payloads, $5 ordering keys, $6 idempotency keys, $7 available at,
/// $8 headers, $9 causes, $10/$11 delivery id bases (hi, lo), $12 e-mail message numbers
/// (1-based), $13 e-mail recipients, $14 now, $15 NOTIFY channel (NULL: none),
/// $16/$17 the distinct (tenant, topic) routes.
fn many_text(t: &Tables) -> String {
    let (m, d, e, c) = (&t.messages, &t.deliveries, &t.endpoints, &t.consumers);
    format!(
        "WITH input AS ( \
           SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], \
                                $6::text[], $7::int8[], $8::text[], $9::text[], $10::bytea[], \
                                $11::int8[]) \
             WITH ORDINALITY AS i(id, tenant, topic, payload, ordering_key, idempotency_key, \
                                  available_at, headers, cause, did_hi, did_lo, ord)), \
         ins AS ( \
           INSERT INTO {m} ({MESSAGE_COLS}) \
           SELECT id, tenant, topic, payload, ordering_key, idempotency_key, available_at, \
                  headers, cause, $14::int8 \
             FROM input ORDER BY ord \
           ON CONFLICT DO NOTHING RETURNING id), \
         good AS (SELECT input.* FROM input WHERE input.id IN (SELECT id FROM ins)), \
         routes AS ( \
           SELECT t.tenant, t.topic, 0 AS grp, 0::int8 AS k1, c.name AS k2, \
                  'handler' AS kind, c.name AS target, NULL::int8 AS hold \
             FROM unnest($16::text[], $17::text[]) AS t(tenant, topic) \
             JOIN {c} c ON {cm} \
           UNION ALL \
           SELECT t.tenant, t.topic, 1, e.created_at, e.id::text, 'webhook', e.id::text, \
                  {hold} \
             FROM unnest($16::text[], $17::text[]) AS t(tenant, topic) \
             JOIN {e} e ON e.tenant = t.tenant AND {em}), \
         dest AS ( \
           SELECT g.ord AS mord, r.grp, r.k1, r.k2, r.kind, r.target, r.hold \
             FROM good g JOIN routes r ON r.tenant = g.tenant AND r.topic = g.topic \
           UNION ALL \
           SELECT g.ord, 2, r.ord, '', 'email', r.rcpt, NULL::int8 \
             FROM unnest($12::int8[], $13::text[]) WITH ORDINALITY AS r(mord, rcpt, ord) \
             JOIN good g ON g.ord = r.mord), \
         nd AS ( \
           INSERT INTO {d} (id, message_id, tenant, topic, ordering_key, kind, target, status, \
                            next_attempt_at, created_at, updated_at) \
           SELECT {did}, g.id, g.tenant, g.topic, g.ordering_key, dest.kind, dest.target, \
                  CASE WHEN dest.hold IS NULL THEN 'pending' ELSE 'held' END, \
                  coalesce(dest.hold, g.available_at), $14::int8, $14::int8 \
             FROM dest JOIN good g ON g.ord = dest.mord \
            ORDER BY dest.mord, dest.grp, dest.k1, dest.k2 \
           RETURNING message_id), \
         counts AS (SELECT message_id, count(*) AS n FROM nd GROUP BY message_id), \
         total AS (SELECT coalesce(sum(n), 0) AS n FROM counts) \
         SELECT i.ord, ins.id IS NOT NULL AS inserted, coalesce(k.n, 0) AS deliveries, \
                ex.id AS existing, \
                CASE WHEN i.ord = 1 AND total.n > 0 AND $15::text IS NOT NULL \
                  THEN pg_notify($15::text, '')::text END \
                  AS notified \
           FROM input i \
           LEFT JOIN ins ON ins.id = i.id \
           LEFT JOIN counts k ON k.message_id = i.id \
           LEFT JOIN LATERAL ( \
                SELECT x.id FROM {m} x \
                 WHERE ins.id IS NULL AND x.tenant = i.tenant AND x.topic = i.topic \
                   AND x.idempotency_key = i.idempotency_key) ex ON true \
           CROSS JOIN total \
          ORDER BY i.ord",
        cm = topic_matches("c.filter", "t.topic"),
        em = topic_matches("e.filter", "t.topic"),
        hold = endpoint_hold("e", "$14::int8"),
        did = derive_id(
            "g.did_hi",
            "g.did_lo",
            "row_number() OVER (PARTITION BY dest.mord \
                                ORDER BY dest.grp, dest.k1, dest.k2)"
        ),
    )
}

impl PostgresStore {
    /// Run [`many_text`] for the messages `sent` of `prepared` on `conn`: one report per sent
    /// message, in order.
    async fn write_batch(
        &self,
        conn: &mut PgConnection,
        prepared: &[Prepared],
        sent: &[usize],
        channel: Option<&str>,
    ) -> Result<Vec<Written>> {
        let n = sent.len();
        let valid = || sent.iter().map(|&i| &prepared[i].valid);
        let bases: Vec<(Vec<u8>, i64)> = sent
            .iter()
            .map(|&i| rows::split_base(prepared[i].base))
            .collect();
        let routes: BTreeSet<(&str, &str)> = valid()
            .map(|v| (v.tenant.as_str(), v.topic.as_str()))
            .collect();
        let (email_of, email_to): (Vec<i64>, Vec<&str>) = valid()
            .enumerate()
            .flat_map(|(ord, v)| v.emails.iter().map(move |r| (ord as i64 + 1, r.as_str())))
            .unzip();
        let rows = sqlx::query(&self.inner.sql.enqueue.many)
            .bind(
                sent.iter()
                    .map(|&i| prepared[i].id.as_uuid())
                    .collect::<Vec<_>>(),
            ) // $1
            .bind(valid().map(|v| v.tenant.as_str()).collect::<Vec<_>>()) // $2
            .bind(valid().map(|v| v.topic.as_str()).collect::<Vec<_>>()) // $3
            .bind(valid().map(|v| v.payload.as_slice()).collect::<Vec<_>>()) // $4
            .bind(
                valid()
                    .map(|v| v.ordering_key.as_ref().map(|k| k.as_str()))
                    .collect::<Vec<_>>(),
            ) // $5
            .bind(
                valid()
                    .map(|v| v.idempotency_key.as_ref().map(|k| k.as_str()))
                    .collect::<Vec<_>>(),
            ) // $6
            .bind(valid().map(|v| ms(v.available_at)).collect::<Vec<_>>()) // $7
            .bind(
                valid()
                    .map(|v| rows::headers_to(&v.headers))
                    .collect::<Vec<_>>(),
            ) // $8
            .bind(
                valid()
                    .map(|v| rows::cause_to(v.cause.as_ref()))
                    .collect::<Vec<_>>(),
            ) // $9
            .bind(bases.iter().map(|b| b.0.clone()).collect::<Vec<_>>()) // $10
            .bind(bases.iter().map(|b| b.1).collect::<Vec<_>>()) // $11
            .bind(email_of) // $12
            .bind(email_to) // $13
            .bind(ms(self.inner.clock.now())) // $14
            .bind(channel) // $15
            .bind(routes.iter().map(|r| r.0).collect::<Vec<_>>()) // $16
            .bind(routes.iter().map(|r| r.1).collect::<Vec<_>>()) // $17
            .fetch_all(&mut *conn)
            .await
            .db()?;
        if rows.len() != n {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "the batch enqueue returned an unexpected number of rows",
            ));
        }
        rows.iter()
            .map(|row| {
                Ok(Written {
                    inserted: get(row, "inserted")?,
                    deliveries: get(row, "deliveries")?,
                    existing: get(row, "existing")?,
                })
            })
            .collect()
    }

    /// Enqueue a batch on `conn`, with a `NOTIFY` on `channel` inside the statement when
    /// given.
    pub(crate) async fn enqueue_batch_on(
        &self,
        conn: &mut PgConnection,
        messages: Vec<NewMessage>,
        channel: Option<&str>,
    ) -> Result<Vec<Enqueued>> {
        let prepared = messages
            .into_iter()
            .map(|m| self.prepare(m))
            .collect::<Result<Vec<_>>>()?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let plan = BatchPlan::new(&prepared);
        let written = self
            .write_batch(conn, &prepared, &plan.sent, channel)
            .await?;
        let mut out: Vec<Option<Enqueued>> = vec![None; prepared.len()];
        for (w, &i) in written.into_iter().zip(&plan.sent) {
            out[i] = Some(self.outcome(conn, &prepared[i], w).await?);
        }
        // `earlier[i]` always names a smaller index, already resolved.
        let mut done: Vec<Enqueued> = Vec::with_capacity(out.len());
        for (e, earlier) in out.into_iter().zip(plan.earlier) {
            let e = match (e, earlier) {
                (Some(e), _) => e,
                (None, Some(j)) => Enqueued {
                    message_id: done[j].message_id,
                    deliveries: 0,
                    duplicate: true,
                },
                (None, None) => {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        "a batch message was neither written nor a duplicate",
                    ))
                }
            };
            done.push(e);
        }
        Ok(done)
    }

    /// The channel to `NOTIFY` inside the caller's transaction, if configured.
    pub(crate) fn in_transaction_channel(&self) -> Option<&str> {
        self.inner
            .config
            .notify_in_transaction
            .then_some(self.inner.channel.as_str())
    }

    /// `MessageStore::enqueue`: one statement on a pooled connection (atomic without an
    /// explicit transaction, committed when it returns), then the wake-up `NOTIFY` on the
    /// same connection before returning, so a producer that exits right after `enqueue`
    /// still wakes every listening dispatcher. Nothing after the statement can fail, so a
    /// committed enqueue is never reported as an error.
    pub(crate) async fn enqueue_own(&self, message: NewMessage) -> Result<Enqueued> {
        let mut conn = self.inner.pool.acquire().await.db()?;
        let e = self.enqueue_on(&mut conn, message, None).await?;
        if e.deliveries > 0 {
            self.notify_on(&mut conn).await;
        }
        Ok(e)
    }

    /// `MessageStore::enqueue_batch`: the batch statement and the look-ups of duplicates
    /// that raced with it in one transaction, so an error means nothing was written; then
    /// the wake-up `NOTIFY` on the same connection before returning.
    pub(crate) async fn enqueue_batch_own(
        &self,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Enqueued>> {
        let mut conn = self.inner.pool.acquire().await.db()?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await.db()?;
        let out = self.enqueue_batch_on(&mut tx, messages, None).await?;
        tx.commit().await.db()?;
        if out.iter().any(|e| e.deliveries > 0) {
            self.notify_on(&mut conn).await;
        }
        Ok(out)
    }

    /// Wake this process's dispatchers, then send the outbox's `NOTIFY` on `conn` (after the
    /// caller's commit) and wait for it: the notification is queued in PostgreSQL when this
    /// returns, whatever happens to this process next. Its own transaction commits without
    /// waiting for a disk flush (`synchronous_commit` off for it alone): a wake-up hint lost
    /// to a crash of the server costs one poll interval, never a message. A failed send is
    /// handed to the store's notifier task, which retries it; it never fails the caller.
    pub(crate) async fn notify_on(&self, conn: &mut PgConnection) {
        self.inner.wake.wakeups().wake();
        // $1 channel. `set_config(…, true)` lasts for this statement's own transaction.
        let sent =
            sqlx::query("SELECT pg_notify($1, ''), set_config('synchronous_commit', 'off', true)")
                .bind(&self.inner.channel)
                .execute(&mut *conn)
                .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "outbox wake-up notification failed; the notifier retries it");
            self.inner.wake.notify_later();
        }
    }
}

/// `MessageStore`.
///
/// # Cancel safety
///
/// `enqueue` is one statement and `enqueue_batch` one transaction: dropping the future
/// leaves the message(s) written or not, never part of a batch. An error is returned only
/// when nothing was committed; once the write committed, the wake-ups cannot fail.
#[async_trait]
impl MessageStore for PostgresStore {
    async fn enqueue(&self, message: NewMessage) -> Result<Enqueued> {
        self.enqueue_own(message).await
    }

    async fn enqueue_batch(&self, messages: Vec<NewMessage>) -> Result<Vec<Enqueued>> {
        self.enqueue_batch_own(messages).await
    }
}
