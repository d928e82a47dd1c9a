//! Reading rows back into domain values, and writing the few values that need encoding.

use std::collections::BTreeMap;

use outboxkit_core::{
    Attempt, AttemptDetail, AttemptOutcome, AttemptRecord, BodyFormat, Cause, ConsumerName,
    DeadReason, Delivery, DeliveryId, DeliveryStatus, Destination, EndpointId, EndpointStatus,
    EndpointUrl, IdempotencyKey, LastDelivery, LastOutcome, Message, MessageId, OrderingKey,
    PayloadFingerprint, Result, SealedSecret, TenantId, Timestamp, Topic, TopicFilter,
    TopicPattern,
};
use outboxkit_core::{Consumer, Endpoint};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

use crate::error::{DbResult, StoreError};

/// A status as the narrow queue and the history store it (migration 7): 0 pending, 1 held,
/// 2 processing, 3 sending (`queue.state`), 4 succeeded, 5 dead (`history.status`).
pub(crate) fn state_code(s: DeliveryStatus) -> Result<i16> {
    Ok(match s {
        DeliveryStatus::Pending => 0,
        DeliveryStatus::Held => 1,
        DeliveryStatus::Processing => 2,
        DeliveryStatus::Sending => 3,
        DeliveryStatus::Succeeded => 4,
        DeliveryStatus::Dead => 5,
        other => {
            return Err(outboxkit_core::Error::new(
                outboxkit_core::ErrorKind::Unexpected,
                format!("the status `{other}` has no code in this store"),
            ))
        }
    })
}

/// The columns of a delivery row, in the order [`delivery`] reads them.
const DELIVERY_COLS: [&str; 21] = [
    "id",
    "message_id",
    "tenant",
    "topic",
    "ordering_key",
    "kind",
    "target",
    "status",
    "attempts",
    "snoozes",
    "next_attempt_at",
    "lease_until",
    "last_outcome",
    "last_status_code",
    "last_excerpt",
    "last_at",
    "dead_reason",
    "created_at",
    "updated_at",
    "completed_at",
    "run",
];

/// The columns [`delivery`] reads, of the table aliased `alias`.
pub(crate) fn delivery_cols(alias: &str) -> String {
    DELIVERY_COLS
        .iter()
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns [`message`] reads.
pub(crate) const MESSAGE_COLS: &str = "id, tenant, topic, payload, ordering_key, \
     idempotency_key, available_at, headers, cause, created_at";

pub(crate) fn corrupt(
    column: &'static str,
) -> impl FnOnce(outboxkit_core::Error) -> outboxkit_core::Error {
    move |e| outboxkit_core::Error::from(StoreError::Corrupt(column)).with_source(e)
}

/// A column as `T`.
pub(crate) fn get<'r, T>(row: &'r PgRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).db()
}

/// A bigint millisecond column as a timestamp.
pub(crate) fn ts(row: &PgRow, column: &'static str) -> Result<Timestamp> {
    let ms: i64 = get(row, column)?;
    Timestamp::from_unix_millis(ms).map_err(corrupt(column))
}

pub(crate) fn ts_opt(row: &PgRow, column: &'static str) -> Result<Option<Timestamp>> {
    let ms: Option<i64> = get(row, column)?;
    ms.map(Timestamp::from_unix_millis)
        .transpose()
        .map_err(corrupt(column))
}

fn count(row: &PgRow, column: &'static str) -> Result<u32> {
    let n: i32 = get(row, column)?;
    u32::try_from(n).map_err(|_| StoreError::Corrupt(column).into())
}

pub(crate) fn status_code(v: Option<i32>, column: &'static str) -> Result<Option<u16>> {
    v.map(|c| u16::try_from(c).map_err(|_| StoreError::Corrupt(column).into()))
        .transpose()
}

/// A stored delivery status.
pub(crate) fn status(s: &str) -> Result<DeliveryStatus> {
    DeliveryStatus::parse(s).map_err(corrupt("status"))
}

/// A delivery from the columns of [`delivery_cols`].
pub(crate) fn delivery(row: &PgRow) -> Result<Delivery> {
    let kind: String = get(row, "kind")?;
    let target: String = get(row, "target")?;
    let last_outcome = match get::<Option<String>>(row, "last_outcome")? {
        Some(o) => Some(LastOutcome {
            outcome: AttemptOutcome::parse(&o).map_err(corrupt("last_outcome"))?,
            status_code: status_code(get(row, "last_status_code")?, "last_status_code")?,
            excerpt: get(row, "last_excerpt")?,
            at: ts(row, "last_at")?,
        }),
        None => None,
    };
    let dead_reason = get::<Option<String>>(row, "dead_reason")?
        .map(|r| DeadReason::parse(&r))
        .transpose()
        .map_err(corrupt("dead_reason"))?;
    Ok(Delivery {
        id: DeliveryId::from_uuid(get(row, "id")?).map_err(corrupt("id"))?,
        message_id: MessageId::from_uuid(get(row, "message_id")?).map_err(corrupt("message_id"))?,
        tenant: TenantId::new(get::<String>(row, "tenant")?).map_err(corrupt("tenant"))?,
        topic: Topic::new(get::<String>(row, "topic")?).map_err(corrupt("topic"))?,
        ordering_key: get::<Option<String>>(row, "ordering_key")?
            .map(OrderingKey::new)
            .transpose()
            .map_err(corrupt("ordering_key"))?,
        destination: Destination::from_parts(&kind, &target).map_err(corrupt("target"))?,
        status: status(&get::<String>(row, "status")?)?,
        attempts: count(row, "attempts")?,
        snoozes: count(row, "snoozes")?,
        next_attempt_at: ts(row, "next_attempt_at")?,
        lease_until: ts_opt(row, "lease_until")?,
        last_outcome,
        dead_reason,
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
        completed_at: ts_opt(row, "completed_at")?,
        run: count(row, "run")?,
    })
}

/// A row of `messages`.
pub(crate) fn message(row: &PgRow) -> Result<Message> {
    Ok(Message {
        id: MessageId::from_uuid(get(row, "id")?).map_err(corrupt("id"))?,
        topic: Topic::new(get::<String>(row, "topic")?).map_err(corrupt("topic"))?,
        payload: get(row, "payload")?,
        tenant: TenantId::new(get::<String>(row, "tenant")?).map_err(corrupt("tenant"))?,
        ordering_key: get::<Option<String>>(row, "ordering_key")?
            .map(OrderingKey::new)
            .transpose()
            .map_err(corrupt("ordering_key"))?,
        idempotency_key: idempotency_key(get(row, "idempotency_key")?)?,
        available_at: ts(row, "available_at")?,
        headers: headers_from(get(row, "headers")?)?,
        cause: cause_from(get(row, "cause")?)?,
        created_at: ts(row, "created_at")?,
    })
}

pub(crate) fn idempotency_key(v: Option<String>) -> Result<Option<IdempotencyKey>> {
    v.map(IdempotencyKey::new)
        .transpose()
        .map_err(corrupt("idempotency_key"))
}

/// Headers as stored: JSON text, `None` when there are none.
pub(crate) fn headers_to(headers: &BTreeMap<String, String>) -> Option<String> {
    if headers.is_empty() {
        None
    } else {
        serde_json::to_string(headers).ok()
    }
}

pub(crate) fn headers_from(v: Option<&str>) -> Result<BTreeMap<String, String>> {
    match v {
        None => Ok(BTreeMap::new()),
        Some(s) => serde_json::from_str(s).map_err(|_| StoreError::Corrupt("headers").into()),
    }
}

/// A cause as stored: JSON text.
pub(crate) fn cause_to(cause: Option<&Cause>) -> Option<String> {
    cause.and_then(|c| serde_json::to_string(c).ok())
}

pub(crate) fn cause_from(v: Option<&str>) -> Result<Option<Cause>> {
    v.map(|s| serde_json::from_str(s).map_err(|_| StoreError::Corrupt("cause").into()))
        .transpose()
}

/// An attempt row of a delivery.
pub(crate) fn attempt(row: &PgRow, delivery_id: DeliveryId) -> Result<Attempt> {
    let outcome: String = get(row, "outcome")?;
    Ok(Attempt {
        delivery_id,
        number: count(row, "number")?,
        probe: get(row, "probe")?,
        run: count(row, "run")?,
        scheduled_at: ts_opt(row, "scheduled_at")?,
        payload: PayloadFingerprint {
            size: u64::try_from(get::<i64>(row, "p_size")?)
                .map_err(|_| StoreError::Corrupt("payload"))?,
            sha256: get(row, "p_sha256")?,
        },
        record: AttemptRecord {
            detail: get::<Option<String>>(row, "detail")?
                .map(|j| {
                    AttemptDetail::from_json(&j)
                        .map(Box::new)
                        .map_err(corrupt("attempt detail"))
                })
                .transpose()?,
            started_at: ts(row, "started_at")?,
            finished_at: ts(row, "finished_at")?,
            outcome: AttemptOutcome::parse(&outcome).map_err(corrupt("outcome"))?,
            status_code: status_code(get(row, "status_code")?, "status_code")?,
            excerpt: get(row, "excerpt")?,
        },
    })
}

/// A topic filter as stored: its patterns' text forms.
pub(crate) fn filter_to(filter: &TopicFilter) -> Vec<String> {
    filter.patterns().iter().map(ToString::to_string).collect()
}

fn filter_from(patterns: Vec<String>) -> Result<TopicFilter> {
    let patterns = patterns
        .iter()
        .map(|p| TopicPattern::parse(p))
        .collect::<Result<Vec<_>>>()
        .map_err(corrupt("filter"))?;
    TopicFilter::new(patterns).map_err(corrupt("filter"))
}

/// An endpoint row.
pub(crate) fn endpoint(row: &PgRow) -> Result<Endpoint> {
    let status: String = get(row, "status")?;
    let reason: Option<String> = get(row, "disabled_reason")?;
    let rate_limit: Option<i32> = get(row, "rate_limit")?;
    Ok(Endpoint {
        id: EndpointId::from_uuid(get(row, "id")?).map_err(corrupt("id"))?,
        tenant: TenantId::new(get::<String>(row, "tenant")?).map_err(corrupt("tenant"))?,
        url: EndpointUrl::parse(&get::<String>(row, "url")?).map_err(corrupt("url"))?,
        description: get(row, "description")?,
        filter: filter_from(get(row, "filter")?)?,
        status: EndpointStatus::from_parts(&status, reason.as_deref())
            .map_err(corrupt("status"))?,
        secret: SealedSecret(get(row, "secret")?),
        previous_secret: get::<Option<Vec<u8>>>(row, "previous_secret")?.map(SealedSecret),
        headers: outboxkit_core::endpoint_headers::decode_headers(&get::<String>(row, "headers")?)
            .map_err(|_| StoreError::Corrupt("headers"))?,
        body_format: BodyFormat::parse(&get::<String>(row, "body_format")?)
            .map_err(corrupt("body_format"))?,
        rate_limit: rate_limit
            .map(|r| u32::try_from(r).map_err(|_| StoreError::Corrupt("rate_limit")))
            .transpose()?,
        fifo: get(row, "fifo")?,
        last_delivery: match get::<Option<String>>(row, "last_outcome")? {
            Some(o) => Some(LastDelivery {
                outcome: AttemptOutcome::parse(&o).map_err(corrupt("last_outcome"))?,
                status_code: status_code(get(row, "last_status_code")?, "last_status_code")?,
                at: ts(row, "last_at")?,
            }),
            None => None,
        },
        created_at: ts(row, "created_at")?,
        updated_at: ts(row, "updated_at")?,
    })
}

/// A consumer row.
pub(crate) fn consumer(row: &PgRow) -> Result<Consumer> {
    Ok(Consumer {
        name: ConsumerName::new(get::<String>(row, "name")?).map_err(corrupt("name"))?,
        filter: filter_from(get(row, "filter")?)?,
        created_at: ts(row, "created_at")?,
        status: outboxkit_core::ConsumerStatus::parse(&get::<String>(row, "status")?)
            .ok_or_else(|| outboxkit_core::Error::from(StoreError::Corrupt("status")))?,
    })
}

/// A UUIDv7 split for `enqueue::derive_id`: the first 8 bytes, and the last 8 as a bigint.
pub(crate) fn split_base(id: Uuid) -> (Vec<u8>, i64) {
    let b = id.as_bytes();
    let mut lo = [0u8; 8];
    lo.copy_from_slice(&b[8..]);
    (b[..8].to_vec(), i64::from_be_bytes(lo))
}

/// The `n`th (1-based) delivery id of a message whose ids derive from `base`: its last 8
/// bytes XORed with `n`, as `enqueue.sql` derives them (`did_hi || int8send(did_lo # n)`).
pub(crate) fn derived_id(base: Uuid, n: u64) -> Uuid {
    Uuid::from_u128(base.as_u128() ^ u128::from(n))
}

/// Milliseconds of a timestamp, as bound to a statement.
pub(crate) fn ms(t: Timestamp) -> i64 {
    t.as_unix_millis()
}

/// A count or code that fits in an `integer` column.
pub(crate) fn int4(v: u32) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_stay_v7() {
        // The derivation XORs the low bits with a small number; version and variant stay.
        let base = Uuid::from_u128(0x0190_0000_0000_7abc_8def_0123_4567_89ab);
        let (hi, lo) = split_base(base);
        for n in [1i64, 2, 255, 65_536] {
            // What the statement computes from the split base …
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&hi);
            bytes[8..].copy_from_slice(&(lo ^ n).to_be_bytes());
            let id = Uuid::from_bytes(bytes);
            // … is what the copy computes.
            assert_eq!(derived_id(base, n as u64), id);
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            assert_ne!(id, base);
        }
    }

    #[test]
    fn headers_round_trip() {
        let mut h = BTreeMap::new();
        assert_eq!(headers_to(&h), None);
        h.insert("trace".to_owned(), "a\"b".to_owned());
        assert_eq!(headers_from(headers_to(&h).as_deref()).unwrap(), h);
    }
}
