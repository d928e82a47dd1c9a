//! Writing messages and their fan-out on any connection inside a transaction: the store's
//! own writer (`enqueue`, `enqueue_batch`) and the caller's ([`SqliteStore::enqueue_in`],
//! [`SqliteStore::enqueue_batch_in`]).

use std::collections::HashMap;
use std::sync::Arc;

use outboxkit_core::{
    fanout, Consumer, Endpoint, Enqueued, Entropy, Limits, MessageId, NewMessage, TenantId,
    Timestamp, ValidMessage,
};
use rusqlite::{params, Connection, OptionalExtension, Transaction};

use crate::error::{Result, SqliteError};
use crate::routes::{read_consumers, read_endpoints, Routes};
use crate::rows::{self, ms};
use crate::store::SqliteStore;
use async_trait::async_trait;
use outboxkit_core::MessageStore;

/// Validate every message before any is written (a batch is all or nothing).
pub(crate) fn validate_all(
    messages: Vec<NewMessage>,
    limits: &Limits,
    now: Timestamp,
) -> outboxkit_core::Result<Vec<ValidMessage>> {
    messages
        .into_iter()
        .map(|m| m.validate(limits, now))
        .collect()
}

/// The message, with the `seq` range its deliveries take (schema 15: the range replaces an
/// index of deliveries by message); NULL when it has none.
const INSERT_MESSAGE: &str = concat!(
    "INSERT INTO outbox_messages (",
    message_cols!(),
    ", first_seq, last_seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
     ON CONFLICT (tenant, topic, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
);

/// The `seq` the next delivery takes: past every row (one seek to the last rowid).
const NEXT_SEQ: &str = "SELECT coalesce(max(seq), 0) + 1 FROM outbox_deliveries";

const INSERT_DELIVERY: &str = "INSERT INTO outbox_deliveries \
     (id, message_id, tenant, topic, ordering_key, kind, target, status, attempts, snoozes, \
      next_attempt_at, created_at, updated_at, barrier, grp, seq) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)";

/// Write validated messages and their deliveries in the caller's open transaction, in
/// order. A message whose `(tenant, topic, idempotency key)` exists (written earlier, or
/// earlier in this batch) writes nothing and reports the first id.
pub(crate) fn write(
    conn: &Connection,
    valid: &[ValidMessage],
    now: Timestamp,
    entropy: &dyn Entropy,
    routes: Option<&Routes>,
) -> Result<Vec<Enqueued>> {
    let mut out = Vec::with_capacity(valid.len());
    let mut consumers: Option<Arc<[Consumer]>> = None;
    let mut endpoints: HashMap<TenantId, Arc<[Endpoint]>> = HashMap::new();
    let mut insert_message = conn.prepare_cached(INSERT_MESSAGE)?;
    let mut insert_delivery = conn.prepare_cached(INSERT_DELIVERY)?;
    for v in valid {
        let m = fanout::message_row(v, now, entropy);
        // The fan-out first: the message row records how many deliveries follow it.
        if consumers.is_none() || !endpoints.contains_key(&m.tenant) {
            let (c, e) = match routes {
                Some(r) => r.lookup(conn, &m.tenant)?,
                None => (
                    match &consumers {
                        Some(c) => c.clone(),
                        None => read_consumers(conn)?.into(),
                    },
                    read_endpoints(conn, &m.tenant)?.into(),
                ),
            };
            consumers.get_or_insert(c);
            endpoints.insert(m.tenant.clone(), e);
        }
        let tenant_endpoints = endpoints.get(&m.tenant).map(|e| &e[..]).unwrap_or_default();
        let destinations = fanout::destinations(
            &m,
            v,
            consumers.as_deref().unwrap_or_default(),
            tenant_endpoints,
        );
        let mut deliveries = fanout::delivery_rows(&m, destinations, entropy);
        fanout::hold_for_endpoints(&mut deliveries, tenant_endpoints, now);
        fanout::hold_for_consumers(&mut deliveries, consumers.as_deref().unwrap_or_default());
        let count = i64::try_from(deliveries.len()).unwrap_or(i64::MAX);
        // The deliveries' seqs, consecutive from the next free one, read in this
        // transaction (the store's own is `BEGIN IMMEDIATE`; in a caller's deferred one,
        // SQLite refuses the write if another connection wrote since the read).
        let first: Option<i64> = if count > 0 {
            Some(conn.prepare_cached(NEXT_SEQ)?.query_row([], |r| r.get(0))?)
        } else {
            None
        };
        let inserted = insert_message.execute(params![
            m.id.to_string(),
            m.topic.as_str(),
            m.payload,
            m.tenant.as_str(),
            m.ordering_key.as_ref().map(|k| k.as_str()),
            m.idempotency_key.as_ref().map(|k| k.as_str()),
            ms(m.available_at),
            rows::headers_json(&m)?,
            rows::cause_json(&m)?,
            ms(m.created_at),
            first,
            first.map(|f| f + count - 1),
        ])?;
        if inserted == 0 {
            out.push(duplicate(conn, v)?);
            continue;
        }
        for (seq, d) in (first.unwrap_or(0)..).zip(&deliveries) {
            let key = d.ordering_key.as_ref().map(|k| k.as_str());
            let fifo = fanout::is_fifo(d, tenant_endpoints);
            let (kind, target) = (d.destination.kind(), d.destination.target());
            let grp = match routes {
                Some(r) => r.groups.id(conn, d.tenant.as_str(), kind, &target)?,
                None => crate::groups::group_id(conn, d.tenant.as_str(), kind, &target)?,
            };
            insert_delivery.execute(params![
                d.id.to_string(),
                d.message_id.to_string(),
                d.tenant.as_str(),
                d.topic.as_str(),
                d.ordering_key.as_ref().map(|k| k.as_str()),
                kind.as_str(),
                target,
                d.status.as_str(),
                d.attempts,
                d.snoozes,
                ms(d.next_attempt_at),
                ms(d.created_at),
                ms(d.updated_at),
                outboxkit_core::claim_rules::barrier_key(key, fifo),
                grp,
                seq,
            ])?;
        }
        out.push(Enqueued {
            message_id: m.id,
            deliveries: u32::try_from(deliveries.len()).unwrap_or(u32::MAX),
            duplicate: false,
        });
    }
    Ok(out)
}

const SELECT_IDEMPOTENT: &str = "SELECT id FROM outbox_messages \
     WHERE tenant = ?1 AND topic = ?2 AND idempotency_key = ?3";

fn duplicate(conn: &Connection, v: &ValidMessage) -> Result<Enqueued> {
    let key = v.idempotency_key.as_ref().map(|k| k.as_str());
    let id: Option<String> = conn
        .prepare_cached(SELECT_IDEMPOTENT)?
        .query_row(params![v.tenant.as_str(), v.topic.as_str(), key], |r| {
            r.get(0)
        })
        .optional()?;
    // The insert was skipped, so the conflicting row exists in this transaction's view.
    let id = id.ok_or(SqliteError::Corrupt("message"))?;
    let message_id = MessageId::parse(&id).map_err(|_| SqliteError::Corrupt("message"))?;
    Ok(Enqueued {
        message_id,
        deliveries: 0,
        duplicate: true,
    })
}

impl SqliteStore {
    /// Write `message` and its fan-out inside the caller's transaction `tx` (a connection
    /// the caller opened on the same file). The message exists if and only if `tx`
    /// commits. A failure leaves `tx` as it was before the call (the writes run in a
    /// savepoint). Blocking: it runs on the caller's thread.
    ///
    /// Call [`SqliteStore::notify`] after `tx` commits so dispatchers in this process wake
    /// at once instead of at their next poll. Open `tx` with
    /// `TransactionBehavior::Immediate` and set a busy timeout on the caller's connection
    /// when other processes write the same file.
    pub fn enqueue_in(
        &self,
        tx: &Transaction<'_>,
        message: NewMessage,
    ) -> outboxkit_core::Result<Enqueued> {
        let mut out = self.enqueue_batch_in(tx, vec![message])?;
        out.pop().ok_or_else(|| {
            outboxkit_core::Error::new(
                outboxkit_core::ErrorKind::Unexpected,
                "the enqueue wrote no result",
            )
        })
    }

    /// [`SqliteStore::enqueue_in`] for many messages: every message is validated before
    /// any is written; a duplicate within the batch is a duplicate of the earlier one.
    pub fn enqueue_batch_in(
        &self,
        tx: &Transaction<'_>,
        messages: Vec<NewMessage>,
    ) -> outboxkit_core::Result<Vec<Enqueued>> {
        let (clock, limits) = self.clock_and_limits();
        let now = clock.now();
        let valid = self::validate_all(messages, limits, now)?;
        self.check_catalogue_on(tx, &valid)?;
        let run = || -> crate::error::Result<Vec<Enqueued>> {
            tx.execute_batch("SAVEPOINT outbox_enqueue")?;
            match self::write(tx, &valid, now, self.entropy(), None) {
                Ok(out) => {
                    tx.execute_batch("RELEASE outbox_enqueue")?;
                    Ok(out)
                }
                Err(e) => {
                    let _ = tx.execute_batch("ROLLBACK TO outbox_enqueue; RELEASE outbox_enqueue");
                    Err(e)
                }
            }
        };
        run().map_err(outboxkit_core::Error::from)
    }
}

#[async_trait]
impl MessageStore for SqliteStore {
    async fn enqueue(&self, message: NewMessage) -> outboxkit_core::Result<Enqueued> {
        let (clock, limits) = self.clock_and_limits();
        let now = clock.now();
        let valid = self::validate_all(vec![message], limits, now)?;
        self.check_catalogue(&valid).await?;
        // The result is taken inside the transaction: once it commits, nothing can fail. A
        // lone enqueue on an idle writer runs here, without the two thread hand-offs (a
        // single insert costs less than them).
        let routes = self.routes().clone();
        let out = self
            .write_here(move |tx, _, entropy| {
                self::write(tx, &valid, now, entropy, Some(&routes))?
                    .pop()
                    .ok_or(crate::error::SqliteError::Corrupt(
                        "enqueue without a result",
                    ))
            })
            .await?;
        self.wake_if(!out.duplicate);
        Ok(out)
    }

    async fn enqueue_batch(
        &self,
        messages: Vec<NewMessage>,
    ) -> outboxkit_core::Result<Vec<Enqueued>> {
        let (clock, limits) = self.clock_and_limits();
        let now = clock.now();
        let valid = self::validate_all(messages, limits, now)?;
        if valid.is_empty() {
            return Ok(Vec::new());
        }
        self.check_catalogue(&valid).await?;
        let routes = self.routes().clone();
        let out = self
            .write(move |tx, _, entropy| self::write(tx, &valid, now, entropy, Some(&routes)))
            .await?;
        self.wake_if(out.iter().any(|e| !e.duplicate));
        Ok(out)
    }
}
