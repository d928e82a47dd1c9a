//! Reading the claim's rows: by position, the columns checked once per batch.
//!
//! The claim returns one row per claimed delivery, its columns in the order of [`COLUMNS`]
//! (the final `SELECT` of `claim` in `sql/claim.sql`). Reading them by name cost a hash of
//! the name and a type check per column and row (29 columns, about 14.7k instructions a row
//! under callgrind, a third of the dispatcher's client work per delivery). So the names and
//! types of the first row's columns are checked against [`COLUMNS`] once, and every row is
//! then read by position without the per-value type check; text that only selects a value
//! (kind, status) is borrowed from the row, not copied.

use outboxkit_core::{
    AttemptOutcome, ClaimToken, Claimed, DeadReason, Delivery, DeliveryId, Destination, Error,
    ErrorKind, LastOutcome, Lease, Message, MessageId, OrderingKey, Result, TenantId, Timestamp,
    Topic,
};
use sqlx::postgres::{PgRow, PgTypeInfo};
use sqlx::{Column, Decode, Postgres, Row, Type};
use uuid::Uuid;

use crate::error::StoreError;
use crate::rows;

/// A column's name and whether a stored type decodes as what [`claimed`] reads there.
type Expected = (&'static str, fn(&PgTypeInfo) -> bool);

fn ty<T: Type<Postgres>>(t: &PgTypeInfo) -> bool {
    T::compatible(t)
}

/// The claim's columns, in order.
const COLUMNS: [Expected; 29] = [
    ("id", ty::<Uuid>),
    ("message_id", ty::<Uuid>),
    ("tenant", ty::<String>),
    ("topic", ty::<String>),
    ("ordering_key", ty::<String>),
    ("kind", ty::<String>),
    ("target", ty::<String>),
    ("status", ty::<String>),
    ("attempts", ty::<i32>),
    ("snoozes", ty::<i32>),
    ("next_attempt_at", ty::<i64>),
    ("lease_until", ty::<i64>),
    ("last_outcome", ty::<String>),
    ("last_status_code", ty::<i32>),
    ("last_excerpt", ty::<String>),
    ("last_at", ty::<i64>),
    ("dead_reason", ty::<String>),
    ("created_at", ty::<i64>),
    ("updated_at", ty::<i64>),
    ("completed_at", ty::<i64>),
    ("run", ty::<i32>),
    ("claim_token", ty::<Uuid>),
    ("claimed_from", ty::<String>),
    ("m_payload", ty::<Vec<u8>>),
    ("m_idempotency_key", ty::<String>),
    ("m_available_at", ty::<i64>),
    ("m_headers", ty::<String>),
    ("m_cause", ty::<String>),
    ("m_created_at", ty::<i64>),
];

/// The position of the column `name` in [`COLUMNS`]; a name not there fails the build (the
/// lookup runs at compile time through [`c!`]).
const fn col(name: &str) -> usize {
    let mut i = 0;
    while i < COLUMNS.len() {
        if same_text(COLUMNS[i].0, name) {
            return i;
        }
        i += 1;
    }
    panic!("no such column in the claim's row")
}

const fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The position of a claim column, found at compile time.
macro_rules! c {
    ($name:literal) => {
        const { col($name) }
    };
}

/// Check that `row`'s columns are [`COLUMNS`], names and types, in order.
fn check_columns(row: &PgRow) -> Result<()> {
    let cols = row.columns();
    let same = cols.len() == COLUMNS.len()
        && cols
            .iter()
            .zip(COLUMNS)
            .all(|(c, (name, fits))| c.name() == name && fits(c.type_info()));
    if same {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Unexpected,
            "the claim statement's columns are not the ones the store reads",
        ))
    }
}

/// The claimed deliveries of the claim's `rows`.
pub(super) fn claimed_all(rows: &[PgRow]) -> Result<Vec<Claimed>> {
    if let Some(first) = rows.first() {
        check_columns(first)?;
    }
    rows.iter().map(claimed).collect()
}

/// Column `i` of `row` (of the type [`COLUMNS`] names for it: checked per batch).
fn at<'r, T: Decode<'r, Postgres>>(row: &'r PgRow, i: usize) -> Result<T> {
    row.try_get_unchecked(i)
        .map_err(|e| Error::from(StoreError::Corrupt(COLUMNS[i].0)).with_source(e))
}

fn ts(row: &PgRow, i: usize) -> Result<Timestamp> {
    Timestamp::from_unix_millis(at(row, i)?).map_err(rows::corrupt(COLUMNS[i].0))
}

fn ts_opt(row: &PgRow, i: usize) -> Result<Option<Timestamp>> {
    at::<Option<i64>>(row, i)?
        .map(Timestamp::from_unix_millis)
        .transpose()
        .map_err(rows::corrupt(COLUMNS[i].0))
}

fn count(row: &PgRow, i: usize) -> Result<u32> {
    u32::try_from(at::<i32>(row, i)?).map_err(|_| StoreError::Corrupt(COLUMNS[i].0).into())
}

/// One claimed delivery, its message and its lease.
fn claimed(row: &PgRow) -> Result<Claimed> {
    let last_outcome = match at::<Option<&str>>(row, c!("last_outcome"))? {
        Some(o) => Some(LastOutcome {
            outcome: AttemptOutcome::parse(o).map_err(rows::corrupt("last_outcome"))?,
            status_code: rows::status_code(at(row, c!("last_status_code"))?, "last_status_code")?,
            excerpt: at(row, c!("last_excerpt"))?,
            at: ts(row, c!("last_at"))?,
        }),
        None => None,
    };
    let dead_reason = at::<Option<&str>>(row, c!("dead_reason"))?
        .map(DeadReason::parse)
        .transpose()
        .map_err(rows::corrupt("dead_reason"))?;
    let tenant =
        TenantId::new(at::<String>(row, c!("tenant"))?).map_err(rows::corrupt("tenant"))?;
    let topic = Topic::new(at::<String>(row, c!("topic"))?).map_err(rows::corrupt("topic"))?;
    let ordering_key = at::<Option<String>>(row, c!("ordering_key"))?
        .map(OrderingKey::new)
        .transpose()
        .map_err(rows::corrupt("ordering_key"))?;
    let delivery = Delivery {
        id: DeliveryId::from_uuid(at(row, c!("id"))?).map_err(rows::corrupt("id"))?,
        message_id: MessageId::from_uuid(at(row, c!("message_id"))?)
            .map_err(rows::corrupt("message_id"))?,
        tenant: tenant.clone(),
        topic: topic.clone(),
        ordering_key: ordering_key.clone(),
        destination: Destination::from_parts(at(row, c!("kind"))?, at(row, c!("target"))?)
            .map_err(rows::corrupt("target"))?,
        status: rows::status(at(row, c!("status"))?)?,
        attempts: count(row, c!("attempts"))?,
        snoozes: count(row, c!("snoozes"))?,
        next_attempt_at: ts(row, c!("next_attempt_at"))?,
        lease_until: ts_opt(row, c!("lease_until"))?,
        last_outcome,
        dead_reason,
        created_at: ts(row, c!("created_at"))?,
        updated_at: ts(row, c!("updated_at"))?,
        completed_at: ts_opt(row, c!("completed_at"))?,
        run: count(row, c!("run"))?,
    };
    let message = Message {
        id: delivery.message_id,
        topic,
        payload: at(row, c!("m_payload"))?,
        tenant: tenant.clone(),
        ordering_key,
        idempotency_key: rows::idempotency_key(at(row, c!("m_idempotency_key"))?)?,
        available_at: ts(row, c!("m_available_at"))?,
        headers: rows::headers_from(at(row, c!("m_headers"))?)?,
        cause: rows::cause_from(at(row, c!("m_cause"))?)?,
        created_at: ts(row, c!("m_created_at"))?,
    };
    let lease = Lease {
        delivery_id: delivery.id,
        tenant,
        token: ClaimToken::from_uuid(at(row, c!("claim_token"))?),
        until: delivery
            .lease_until
            .ok_or_else(|| Error::new(ErrorKind::Unexpected, "a claimed row has no lease"))?,
        attempts: delivery.attempts,
        snoozes: delivery.snoozes,
        claimed_from: rows::status(at(row, c!("claimed_from"))?)?,
    };
    Ok(Claimed {
        lease,
        delivery,
        message,
    })
}
