//! `MessageStore`: a message and its fan-out deliveries in one statement, alone or in
//! batches, in the caller's transaction or in the store's own.
//!
//! Fan-out happens at enqueue, inside the statement: one delivery to every consumer whose
//! filter matches the topic, to every endpoint of the message's tenant whose filter matches
//! (held when the endpoint is paused or disabled), and to every e-mail recipient, numbered in
//! that order and given ids derived from one random UUIDv7 base per message. A large batch
//! without idempotency keys is written with binary `COPY` instead (`write_copied`): the
//! destinations are read in one statement, numbered here in the same order, and copied in
//! with the messages (`PostgresConfig::copy_batches_from`).

use std::collections::{BTreeSet, HashMap};

use outboxkit_core::{
    fanout, DeliveryId, Enqueued, Error, ErrorKind, MessageId, NewMessage, Result, ValidMessage,
};
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::sql::Params;
use crate::store::PostgresStore;
use async_trait::async_trait;
use outboxkit_core::MessageStore;

mod copied;

/// One message ready to write: validated, with its id and the base of its delivery ids.
struct Prepared {
    valid: ValidMessage,
    id: MessageId,
    base: Uuid,
    /// The time it was validated at: its `created_at`, and its `available_at` when it has no
    /// delay.
    now: outboxkit_core::Timestamp,
}

/// What the statement of one message reports.
struct Written {
    inserted: bool,
    deliveries: i64,
    existing: Option<Uuid>,
}

impl PostgresStore {
    fn prepare(&self, message: NewMessage) -> Result<Prepared> {
        self.prepare_at(message, self.inner.clock.now())
    }

    /// [`PostgresStore::prepare`] at `now` (a batch prepares every message at one instant,
    /// which is then its created_at and the start of its holds, as for one message).
    fn prepare_at(&self, message: NewMessage, now: outboxkit_core::Timestamp) -> Result<Prepared> {
        let valid = message.validate(&self.inner.config.limits, now)?;
        let row = fanout::message_row(&valid, now, &*self.inner.entropy);
        let base = DeliveryId::generate(now, &*self.inner.entropy).as_uuid();
        Ok(Prepared {
            valid,
            id: row.id,
            base,
            now,
        })
    }

    /// Run `one` of `sql/enqueue.sql` for `p` on `conn`.
    async fn write_one(
        &self,
        conn: &mut PgConnection,
        p: &Prepared,
        channel: Option<&str>,
    ) -> Result<Written> {
        let v = &p.valid;
        let (hi, lo) = rows::split_base(p.base);
        let emails: Vec<&str> = v.emails.iter().map(|r| r.as_str()).collect();
        let params = Params::new()
            .set("id", p.id.as_uuid())
            .set("tenant", v.tenant.as_str())
            .set("topic", v.topic.as_str())
            .set("payload", v.payload.as_slice())
            .set("ordering_key", v.ordering_key.as_ref().map(|k| k.as_str()))
            .set(
                "idempotency_key",
                v.idempotency_key.as_ref().map(|k| k.as_str()),
            )
            .set("available_at", ms(v.available_at))
            .set("headers", rows::headers_to(&v.headers))
            .set("cause", rows::cause_to(v.cause.as_ref()))
            .set("now", ms(p.now))
            .set("did_hi", hi)
            .set("did_lo", lo)
            .set("recipients", emails)
            .set("channel", channel);
        let row = (self.inner.sql.enqueue.one.bind(params)?)
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
        self.check_catalogue(conn, &[&p.valid]).await?;
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
        let params = Params::new()
            .set("tenant", v.tenant.as_str())
            .set("topic", v.topic.as_str())
            .set("idempotency_key", key.as_str());
        let id: Option<Uuid> = (self.inner.sql.enqueue.find_idempotent.bind_scalar(params)?)
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

/// The messages of a batch that are written (a repeat of an earlier idempotency key is not),
/// the instant they were prepared at, and the channel to notify.
struct Sent<'a> {
    prepared: &'a [Prepared],
    /// The indexes into `prepared` of the messages written, in order.
    indexes: &'a [usize],
    /// Milliseconds: the messages' created_at and the start of their holds.
    now: i64,
    channel: Option<&'a str>,
}

impl<'a> Sent<'a> {
    fn messages(&self) -> impl Iterator<Item = &'a Prepared> + '_ {
        self.indexes.iter().map(|&i| &self.prepared[i])
    }
}

impl PostgresStore {
    /// Run [`many_text`] for the messages `sent` of `prepared` on `conn`: one report per sent
    /// message, in order.
    async fn write_batch(&self, conn: &mut PgConnection, batch: &Sent<'_>) -> Result<Vec<Written>> {
        let n = batch.indexes.len();
        let valid = || batch.messages().map(|p| &p.valid);
        let bases: Vec<(Vec<u8>, i64)> =
            batch.messages().map(|p| rows::split_base(p.base)).collect();
        let (route_tenants, route_topics) = route_arrays(valid());
        let (email_of, email_to): (Vec<i64>, Vec<&str>) = valid()
            .enumerate()
            .flat_map(|(ord, v)| v.emails.iter().map(move |r| (ord as i64 + 1, r.as_str())))
            .unzip();
        let ids: Vec<_> = batch.messages().map(|p| p.id.as_uuid()).collect();
        let params = Params::new()
            .set("ids", ids)
            .set(
                "tenants",
                valid().map(|v| v.tenant.as_str()).collect::<Vec<_>>(),
            )
            .set(
                "topics",
                valid().map(|v| v.topic.as_str()).collect::<Vec<_>>(),
            )
            .set(
                "payloads",
                valid().map(|v| v.payload.as_slice()).collect::<Vec<_>>(),
            )
            .set(
                "ordering_keys",
                valid()
                    .map(|v| v.ordering_key.as_ref().map(|k| k.as_str()))
                    .collect::<Vec<_>>(),
            )
            .set(
                "idempotency_keys",
                valid()
                    .map(|v| v.idempotency_key.as_ref().map(|k| k.as_str()))
                    .collect::<Vec<_>>(),
            )
            .set(
                "available_at",
                valid().map(|v| ms(v.available_at)).collect::<Vec<_>>(),
            )
            .set(
                "headers",
                valid()
                    .map(|v| rows::headers_to(&v.headers))
                    .collect::<Vec<_>>(),
            )
            .set(
                "causes",
                valid()
                    .map(|v| rows::cause_to(v.cause.as_ref()))
                    .collect::<Vec<_>>(),
            )
            .set(
                "did_hi",
                bases.iter().map(|b| b.0.clone()).collect::<Vec<_>>(),
            )
            .set("did_lo", bases.iter().map(|b| b.1).collect::<Vec<_>>())
            .set("email_messages", email_of)
            .set("recipients", email_to)
            .set("now", batch.now)
            .set("channel", batch.channel)
            .set("route_tenants", route_tenants)
            .set("route_topics", route_topics);
        let rows = (self.inner.sql.enqueue.many.bind(params)?)
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
        let now = self.inner.clock.now();
        let prepared = messages
            .into_iter()
            .map(|m| self.prepare_at(m, now))
            .collect::<Result<Vec<_>>>()?;
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let valid: Vec<&ValidMessage> = prepared.iter().map(|p| &p.valid).collect();
        self.check_catalogue(conn, &valid).await?;
        let plan = BatchPlan::new(&prepared);
        let copied = plan.sent.len() >= self.inner.config.copy_batches_from
            && valid.iter().all(|v| v.idempotency_key.is_none());
        let batch = Sent {
            prepared: &prepared,
            indexes: &plan.sent,
            now: ms(now),
            channel,
        };
        let written = if copied {
            self.write_copied(conn, &batch).await?
        } else {
            self.write_batch(conn, &batch).await?
        };
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
        // $1 channel, $2 the tag (this process was woken just now: its listener skips the
        // echo). `set_config(…, true)` lasts for this statement's own transaction.
        let sent =
            sqlx::query("SELECT pg_notify($1, $2), set_config('synchronous_commit', 'off', true)")
                .bind(&self.inner.channel)
                .bind(self.inner.wake.tag())
                .execute(&mut *conn)
                .await;
        if let Err(e) = sent {
            tracing::warn!(error = %e, "outbox wake-up notification failed; the notifier retries it");
            self.inner.wake.notify_later();
        }
    }
}

/// The distinct (tenant, topic) pairs of a batch, as the two arrays `batch_routes` reads.
fn route_arrays<'a>(valid: impl Iterator<Item = &'a ValidMessage>) -> (Vec<&'a str>, Vec<&'a str>) {
    let routes: BTreeSet<(&str, &str)> = valid
        .map(|v| (v.tenant.as_str(), v.topic.as_str()))
        .collect();
    routes.into_iter().unzip()
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
