//! Reading rows into domain values and writing domain values as column values.
//!
//! Column orders match the column lists below. A stored value that does not decode is
//! corrupt data ([`SqliteError::Corrupt`]), never an `InvalidInput` blamed on the caller.

/// The delivery columns, in the order [`crate::rows::delivery`] reads them.
macro_rules! delivery_cols {
    () => {
        "id, message_id, tenant, topic, ordering_key, kind, target, status, attempts, snoozes, \
         next_attempt_at, lease_until, last_outcome, last_status_code, last_excerpt, last_at, \
         dead_reason, created_at, updated_at, completed_at, run"
    };
}

/// The message columns, in the order [`crate::rows::message`] reads them.
macro_rules! message_cols {
    () => {
        "id, topic, payload, tenant, ordering_key, idempotency_key, available_at, headers, \
         cause, created_at"
    };
}

/// The endpoint columns, in the order [`crate::rows::endpoint`] reads them.
macro_rules! endpoint_cols {
    () => {
        "id, tenant, url, description, filter, status, disabled_reason, secret, \
         previous_secret, body_format, rate_limit, created_at, updated_at, fifo, headers"
    };
}

/// The endpoint columns and its last delivery, in the order [`crate::rows::endpoint`] reads
/// them.
macro_rules! endpoint_read_cols {
    () => {
        concat!(
            endpoint_cols!(),
            ", last_outcome, last_status_code, last_at"
        )
    };
}

use std::collections::BTreeMap;

use outboxkit_core::endpoint_headers::decode_headers;

use outboxkit_core::{
    Attempt, AttemptDetail, AttemptOutcome, AttemptRecord, BodyFormat, Consumer, ConsumerName,
    DeadReason, Delivery, DeliveryId, DeliveryStatus, Destination, Endpoint, EndpointId,
    EndpointStatus, EndpointUrl, IdempotencyKey, LastDelivery, LastOutcome, Message, MessageId,
    OrderingKey, PayloadFingerprint, SealedSecret, TenantId, Timestamp, Topic, TopicFilter,
};
use rusqlite::types::FromSql;
use rusqlite::{Params, Row, Statement};

use crate::error::{Result, SqliteError};

/// A timestamp as stored.
pub(crate) fn ms(t: Timestamp) -> i64 {
    t.as_unix_millis()
}

/// An optional timestamp as stored.
pub(crate) fn opt_ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(ms)
}

/// Run `stmt` with `params` and read every row with `f`.
pub(crate) fn collect<T, P: Params>(
    stmt: &mut Statement<'_>,
    params: P,
    f: impl Fn(&Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(f(row)?);
    }
    Ok(out)
}

fn get<T: FromSql>(row: &Row<'_>, i: usize) -> Result<T> {
    Ok(row.get(i)?)
}

fn parsed<T, E>(what: &'static str, r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|_| SqliteError::Corrupt(what))
}

fn time(row: &Row<'_>, i: usize, what: &'static str) -> Result<Timestamp> {
    parsed(what, Timestamp::from_unix_millis(get(row, i)?))
}

fn opt_time(row: &Row<'_>, i: usize, what: &'static str) -> Result<Option<Timestamp>> {
    get::<Option<i64>>(row, i)?
        .map(|v| parsed(what, Timestamp::from_unix_millis(v)))
        .transpose()
}

fn count(row: &Row<'_>, i: usize, what: &'static str) -> Result<u32> {
    parsed(what, u32::try_from(get::<i64>(row, i)?))
}

fn opt_status_code(row: &Row<'_>, i: usize, what: &'static str) -> Result<Option<u16>> {
    get::<Option<i64>>(row, i)?
        .map(|v| parsed(what, u16::try_from(v)))
        .transpose()
}

/// A delivery from the columns of [`delivery_cols!`].
pub(crate) fn delivery(row: &Row<'_>) -> Result<Delivery> {
    const W: &str = "delivery";
    let last_outcome = match get::<Option<String>>(row, 12)? {
        Some(o) => Some(LastOutcome {
            outcome: parsed(W, AttemptOutcome::parse(&o))?,
            status_code: opt_status_code(row, 13, W)?,
            excerpt: get(row, 14)?,
            at: time(row, 15, W)?,
        }),
        None => None,
    };
    Ok(Delivery {
        id: parsed(W, DeliveryId::parse(&get::<String>(row, 0)?))?,
        message_id: parsed(W, MessageId::parse(&get::<String>(row, 1)?))?,
        tenant: parsed(W, TenantId::new(get::<String>(row, 2)?))?,
        topic: parsed(W, Topic::new(get::<String>(row, 3)?))?,
        ordering_key: get::<Option<String>>(row, 4)?
            .map(|k| parsed(W, OrderingKey::new(k)))
            .transpose()?,
        destination: parsed(
            W,
            Destination::from_parts(&get::<String>(row, 5)?, &get::<String>(row, 6)?),
        )?,
        status: parsed(W, DeliveryStatus::parse(&get::<String>(row, 7)?))?,
        attempts: count(row, 8, W)?,
        snoozes: count(row, 9, W)?,
        next_attempt_at: time(row, 10, W)?,
        lease_until: opt_time(row, 11, W)?,
        last_outcome,
        dead_reason: get::<Option<String>>(row, 16)?
            .map(|r| parsed(W, DeadReason::parse(&r)))
            .transpose()?,
        created_at: time(row, 17, W)?,
        updated_at: time(row, 18, W)?,
        completed_at: opt_time(row, 19, W)?,
        run: count(row, 20, W)?,
    })
}

/// A claimed row as the lease leaves it (`claim::CANDIDATES`'s columns 1–12).
pub(crate) struct Leased {
    id: DeliveryId,
    pub(crate) message_id: MessageId,
    attempts: u32,
    snoozes: u32,
    run: u32,
    last_outcome: Option<LastOutcome>,
    dead_reason: Option<DeadReason>,
    completed_at: Option<Timestamp>,
    pub(crate) claimed_from: DeliveryStatus,
}

/// A leased row from the columns of `claim::CANDIDATES`.
pub(crate) fn leased(row: &Row<'_>) -> Result<Leased> {
    const W: &str = "delivery";
    let last_outcome = match get::<Option<String>>(row, 6)? {
        Some(o) => Some(LastOutcome {
            outcome: parsed(W, AttemptOutcome::parse(&o))?,
            status_code: opt_status_code(row, 7, W)?,
            excerpt: get(row, 8)?,
            at: time(row, 9, W)?,
        }),
        None => None,
    };
    Ok(Leased {
        id: parsed(W, DeliveryId::parse(&get::<String>(row, 1)?))?,
        message_id: parsed(W, MessageId::parse(&get::<String>(row, 2)?))?,
        attempts: count(row, 3, W)?,
        snoozes: count(row, 4, W)?,
        run: count(row, 5, W)?,
        last_outcome,
        dead_reason: get::<Option<String>>(row, 10)?
            .map(|r| parsed(W, DeadReason::parse(&r)))
            .transpose()?,
        completed_at: opt_time(row, 11, W)?,
        claimed_from: claimed_from(row, 12)?,
    })
}

impl Leased {
    /// The claimed delivery: the rest from its message, its group's destination and the
    /// claim (processing, leased until `until`, changed at `now`).
    pub(crate) fn delivery(
        self,
        message: &Message,
        destination: Destination,
        until: Timestamp,
        now: Timestamp,
    ) -> Delivery {
        Delivery {
            id: self.id,
            message_id: self.message_id,
            tenant: message.tenant.clone(),
            topic: message.topic.clone(),
            ordering_key: message.ordering_key.clone(),
            destination,
            status: DeliveryStatus::Processing,
            attempts: self.attempts,
            snoozes: self.snoozes,
            next_attempt_at: until,
            lease_until: Some(until),
            last_outcome: self.last_outcome,
            dead_reason: self.dead_reason,
            created_at: message.created_at,
            updated_at: now,
            completed_at: self.completed_at,
            run: self.run,
        }
    }
}

/// The status a claimed delivery was claimed from, in column `i`.
pub(crate) fn claimed_from(row: &Row<'_>, i: usize) -> Result<DeliveryStatus> {
    parsed("delivery", DeliveryStatus::parse(&get::<String>(row, i)?))
}

/// A message from the columns of [`message_cols!`].
pub(crate) fn message(row: &Row<'_>) -> Result<Message> {
    const W: &str = "message";
    let headers: BTreeMap<String, String> = match get::<Option<String>>(row, 7)? {
        Some(h) => parsed(W, serde_json::from_str(&h))?,
        None => BTreeMap::new(),
    };
    Ok(Message {
        id: parsed(W, MessageId::parse(&get::<String>(row, 0)?))?,
        topic: parsed(W, Topic::new(get::<String>(row, 1)?))?,
        payload: get(row, 2)?,
        tenant: parsed(W, TenantId::new(get::<String>(row, 3)?))?,
        ordering_key: get::<Option<String>>(row, 4)?
            .map(|k| parsed(W, OrderingKey::new(k)))
            .transpose()?,
        idempotency_key: get::<Option<String>>(row, 5)?
            .map(|k| parsed(W, IdempotencyKey::new(k)))
            .transpose()?,
        available_at: time(row, 6, W)?,
        headers,
        cause: get::<Option<String>>(row, 8)?
            .map(|c| parsed(W, serde_json::from_str(&c)))
            .transpose()?,
        created_at: time(row, 9, W)?,
    })
}

/// A message's headers as stored (`NULL` when there are none).
pub(crate) fn headers_json(m: &Message) -> Result<Option<String>> {
    if m.headers.is_empty() {
        return Ok(None);
    }
    parsed("message", serde_json::to_string(&m.headers)).map(Some)
}

/// A message's cause as stored.
pub(crate) fn cause_json(m: &Message) -> Result<Option<String>> {
    m.cause
        .as_ref()
        .map(|c| parsed("message", serde_json::to_string(c)))
        .transpose()
}

/// An endpoint from the columns of [`endpoint_read_cols!`].
pub(crate) fn endpoint(row: &Row<'_>) -> Result<Endpoint> {
    const W: &str = "endpoint";
    let status = get::<String>(row, 5)?;
    let reason = get::<Option<String>>(row, 6)?;
    Ok(Endpoint {
        id: parsed(W, EndpointId::parse(&get::<String>(row, 0)?))?,
        tenant: parsed(W, TenantId::new(get::<String>(row, 1)?))?,
        url: parsed(W, EndpointUrl::parse(&get::<String>(row, 2)?))?,
        description: get(row, 3)?,
        filter: parsed(W, TopicFilter::parse(&get::<String>(row, 4)?))?,
        status: parsed(W, EndpointStatus::from_parts(&status, reason.as_deref()))?,
        secret: SealedSecret(get(row, 7)?),
        previous_secret: get::<Option<Vec<u8>>>(row, 8)?.map(SealedSecret),
        headers: parsed(W, decode_headers(&get::<String>(row, 14)?))?,
        body_format: parsed(W, BodyFormat::parse(&get::<String>(row, 9)?))?,
        rate_limit: get::<Option<i64>>(row, 10)?
            .map(|r| parsed(W, u32::try_from(r)))
            .transpose()?,
        fifo: get::<i64>(row, 13)? != 0,
        last_delivery: match get::<Option<String>>(row, 15)? {
            Some(o) => Some(LastDelivery {
                outcome: parsed(W, AttemptOutcome::parse(&o))?,
                status_code: opt_status_code(row, 16, W)?,
                at: time(row, 17, W)?,
            }),
            None => None,
        },
        created_at: time(row, 11, W)?,
        updated_at: time(row, 12, W)?,
    })
}

/// A consumer from `name, filter, created_at`.
pub(crate) fn consumer(row: &Row<'_>) -> Result<Consumer> {
    const W: &str = "consumer";
    Ok(Consumer {
        name: parsed(W, ConsumerName::new(get::<String>(row, 0)?))?,
        filter: parsed(W, TopicFilter::parse(&get::<String>(row, 1)?))?,
        created_at: time(row, 2, W)?,
        status: outboxkit_core::ConsumerStatus::parse(&get::<String>(row, 3)?)
            .ok_or(SqliteError::Corrupt("consumer status"))?,
    })
}

/// An attempt from the columns `ledger::attempts` reads, with its payload's fingerprint.
pub(crate) fn attempt(row: &Row<'_>, payload: &PayloadFingerprint) -> Result<Attempt> {
    const W: &str = "attempt";
    Ok(Attempt {
        delivery_id: parsed(W, DeliveryId::parse(&get::<String>(row, 0)?))?,
        number: count(row, 1, W)?,
        probe: get::<bool>(row, 2)?,
        run: count(row, 8, W)?,
        scheduled_at: opt_time(row, 9, W)?,
        payload: payload.clone(),
        record: AttemptRecord {
            detail: get::<Option<String>>(row, 10)?
                .map(|j| parsed("attempt detail", AttemptDetail::from_json(&j)).map(Box::new))
                .transpose()?,
            started_at: time(row, 3, W)?,
            finished_at: time(row, 4, W)?,
            outcome: parsed(W, AttemptOutcome::parse(&get::<String>(row, 5)?))?,
            status_code: opt_status_code(row, 6, W)?,
            excerpt: get(row, 7)?,
        },
    })
}
