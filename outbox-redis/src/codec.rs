//! Encoding script arguments and decoding script replies.
//!
//! Deliveries and messages come back as `HMGET` arrays in the field order of
//! `scripts/common.lua` (`DF`, `MF`); endpoints as `HGETALL` pairs.

use std::collections::{BTreeMap, HashMap};

use outbox_core::{
    Attempt, AttemptRecord, BodyFormat, Cause, ClaimToken, Consumer, ConsumerName, DeadReason,
    Delivery, DeliveryId, DeliveryStatus, Destination, Endpoint, EndpointId, EndpointStatus,
    EndpointUrl, Enqueued, IdempotencyKey, LastOutcome, Message, MessageId, OrderingKey, Result,
    SealedSecret, TenantId, Timestamp, Topic, TopicFilter,
};
use redis::{FromRedisValue, RedisResult, Value};

use crate::error::corrupt;

/// Script arguments, each one binary-safe.
#[derive(Debug, Default)]
pub(crate) struct Args(pub(crate) Vec<Vec<u8>>);

impl Args {
    pub(crate) fn new() -> Self {
        Args(Vec::with_capacity(16))
    }

    pub(crate) fn s(&mut self, v: impl AsRef<str>) -> &mut Self {
        self.0.push(v.as_ref().as_bytes().to_vec());
        self
    }

    pub(crate) fn b(&mut self, v: impl Into<Vec<u8>>) -> &mut Self {
        self.0.push(v.into());
        self
    }

    pub(crate) fn n(&mut self, v: impl Into<i64>) -> &mut Self {
        self.0.push(v.into().to_string().into_bytes());
        self
    }

    pub(crate) fn t(&mut self, v: Timestamp) -> &mut Self {
        self.n(v.as_unix_millis())
    }

    pub(crate) fn opt(&mut self, v: Option<impl AsRef<str>>) -> &mut Self {
        match v {
            Some(v) => self.s(v),
            None => self.s(""),
        }
    }
}

/// The array of a reply (`Nil` is empty).
pub(crate) fn items(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        _ => Err(corrupt("reply")),
    }
}

/// The text of a reply item; `None` for `Nil`.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// An integer reply item.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => text(v)?.parse().ok(),
    }
}

fn ms(s: &str) -> Option<Timestamp> {
    Timestamp::from_unix_millis(s.parse().ok()?).ok()
}

/// One `HMGET` row, read by position.
struct Row<'a>(&'a [Value], &'static str);

impl Row<'_> {
    fn opt(&self, i: usize) -> Option<String> {
        self.0.get(i).and_then(text).filter(|s| !s.is_empty())
    }
    fn req(&self, i: usize) -> Result<String> {
        self.opt(i).ok_or_else(|| corrupt(self.1))
    }
    fn ms(&self, i: usize) -> Result<Timestamp> {
        ms(&self.req(i)?).ok_or_else(|| corrupt(self.1))
    }
    fn opt_ms(&self, i: usize) -> Result<Option<Timestamp>> {
        self.opt(i)
            .map(|s| ms(&s).ok_or_else(|| corrupt(self.1)))
            .transpose()
    }
    fn u32(&self, i: usize) -> Result<u32> {
        self.req(i)?.parse().map_err(|_| corrupt(self.1))
    }
    fn parse<T>(&self, i: usize, f: impl FnOnce(String) -> Result<T>) -> Result<T> {
        f(self.req(i)?).map_err(|_| corrupt(self.1))
    }
    fn parse_opt<T>(&self, i: usize, f: impl FnOnce(String) -> Result<T>) -> Result<Option<T>> {
        self.opt(i)
            .map(|s| f(s).map_err(|_| corrupt(self.1)))
            .transpose()
    }
    fn json_opt<T: serde::de::DeserializeOwned>(&self, i: usize) -> Result<Option<T>> {
        self.opt(i)
            .map(|s| serde_json::from_str(&s).map_err(|_| corrupt(self.1)))
            .transpose()
    }
}

/// A delivery from its `HMGET` row (`DF` order).
pub(crate) fn delivery(v: &[Value]) -> Result<Delivery> {
    let r = Row(v, "delivery");
    let kind = r.req(5)?;
    let target = r.req(6)?;
    Ok(Delivery {
        id: r.parse(0, |s| DeliveryId::parse(&s))?,
        message_id: r.parse(1, |s| MessageId::parse(&s))?,
        tenant: r.parse(2, TenantId::new)?,
        topic: r.parse(3, Topic::new)?,
        ordering_key: r.parse_opt(4, OrderingKey::new)?,
        destination: Destination::from_parts(&kind, &target).map_err(|_| corrupt("delivery"))?,
        status: r.parse(7, |s| DeliveryStatus::parse(&s))?,
        attempts: r.u32(8)?,
        snoozes: r.u32(9)?,
        next_attempt_at: r.ms(10)?,
        lease_until: r.opt_ms(11)?,
        last_outcome: r.json_opt::<LastOutcome>(13)?,
        dead_reason: r.parse_opt(14, |s| DeadReason::parse(&s))?,
        created_at: r.ms(15)?,
        updated_at: r.ms(16)?,
        completed_at: r.opt_ms(17)?,
    })
}

/// Whether a `HMGET` row names a stored hash (its first field, the id, is present).
pub(crate) fn exists(v: &[Value]) -> bool {
    v.first().is_some_and(|f| !matches!(f, Value::Nil))
}

/// A message from its `HMGET` row (`MF` order).
pub(crate) fn message(v: &[Value]) -> Result<Message> {
    let r = Row(v, "message");
    let payload = match v.get(2) {
        Some(Value::BulkString(b)) => b.clone(),
        _ => return Err(corrupt("message")),
    };
    Ok(Message {
        id: r.parse(0, |s| MessageId::parse(&s))?,
        topic: r.parse(1, Topic::new)?,
        payload,
        tenant: r.parse(3, TenantId::new)?,
        ordering_key: r.parse_opt(4, OrderingKey::new)?,
        idempotency_key: r.parse_opt(5, IdempotencyKey::new)?,
        available_at: r.ms(6)?,
        headers: r
            .json_opt::<BTreeMap<String, String>>(7)?
            .unwrap_or_default(),
        cause: r.json_opt::<Cause>(8)?,
        created_at: r.ms(9)?,
    })
}

/// The lease token, in the short form the scripts store.
pub(crate) fn token_arg(t: &ClaimToken) -> String {
    t.as_uuid().simple().to_string()
}

/// One ledger entry: `number|probe|record json`.
pub(crate) fn attempt(delivery: DeliveryId, v: &Value) -> Result<Attempt> {
    let bad = || corrupt("attempt");
    let s = text(v).ok_or_else(bad)?;
    let mut parts = s.splitn(3, '|');
    let number = parts.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
    let probe = parts.next().ok_or_else(bad)? == "1";
    let record: AttemptRecord =
        serde_json::from_str(parts.next().ok_or_else(bad)?).map_err(|_| bad())?;
    Ok(Attempt {
        delivery_id: delivery,
        number,
        probe,
        record,
    })
}

/// An endpoint as hash field/value pairs (everything but the version).
pub(crate) fn endpoint_fields(e: &Endpoint) -> Vec<(&'static str, Vec<u8>)> {
    let mut f: Vec<(&'static str, Vec<u8>)> = vec![
        ("id", e.id.to_string().into_bytes()),
        ("tenant", e.tenant.as_str().into()),
        ("url", e.url.as_str().into()),
        ("desc", e.description.clone().into_bytes()),
        ("filter", e.filter.to_string().into_bytes()),
        ("status", e.status.as_str().into()),
        ("secret", e.secret.0.clone()),
        ("body", e.body_format.as_str().into()),
        (
            "created",
            e.created_at.as_unix_millis().to_string().into_bytes(),
        ),
        (
            "updated",
            e.updated_at.as_unix_millis().to_string().into_bytes(),
        ),
    ];
    if let Some(r) = e.status.reason() {
        f.push(("reason", r.as_str().into()));
    }
    if let Some(p) = &e.previous_secret {
        f.push(("prev", p.0.clone()));
    }
    if let Some(r) = e.rate_limit {
        f.push(("rate", r.to_string().into_bytes()));
    }
    f
}

/// The optional endpoint fields, deleted when absent on update.
pub(crate) const ENDPOINT_OPTIONAL: [&str; 3] = ["reason", "prev", "rate"];

/// An endpoint and its version from `HGETALL` pairs.
pub(crate) fn endpoint(v: &[Value]) -> Result<(Endpoint, String)> {
    let bad = || corrupt("endpoint");
    let mut h: HashMap<String, Vec<u8>> = HashMap::with_capacity(v.len() / 2);
    for pair in v.chunks(2) {
        let (Some(k), Some(Value::BulkString(val))) = (pair.first().and_then(text), pair.get(1))
        else {
            return Err(bad());
        };
        h.insert(k, val.clone());
    }
    let s = |k: &str| -> Result<String> {
        h.get(k)
            .and_then(|b| String::from_utf8(b.clone()).ok())
            .ok_or_else(bad)
    };
    let opt = |k: &str| h.get(k).and_then(|b| String::from_utf8(b.clone()).ok());
    let t = |k: &str| -> Result<Timestamp> { ms(&s(k)?).ok_or_else(bad) };
    let e = Endpoint {
        id: EndpointId::parse(&s("id")?).map_err(|_| bad())?,
        tenant: TenantId::new(s("tenant")?).map_err(|_| bad())?,
        url: EndpointUrl::parse(&s("url")?).map_err(|_| bad())?,
        description: s("desc")?,
        filter: TopicFilter::parse(&s("filter")?).map_err(|_| bad())?,
        status: EndpointStatus::from_parts(&s("status")?, opt("reason").as_deref())
            .map_err(|_| bad())?,
        secret: SealedSecret(h.get("secret").cloned().ok_or_else(bad)?),
        previous_secret: h.get("prev").cloned().map(SealedSecret),
        body_format: BodyFormat::parse(&s("body")?).map_err(|_| bad())?,
        rate_limit: opt("rate")
            .map(|r| r.parse().map_err(|_| bad()))
            .transpose()?,
        created_at: t("created")?,
        updated_at: t("updated")?,
    };
    Ok((e, opt("ver").unwrap_or_default()))
}

/// A consumer's stored value: `created_at|filter`.
pub(crate) fn consumer_value(c: &Consumer) -> String {
    format!("{}|{}", c.created_at.as_unix_millis(), c.filter)
}

/// A consumer from its name and stored value.
pub(crate) fn consumer(name: &str, value: &str) -> Result<Consumer> {
    let bad = || corrupt("consumer");
    let (created, filter) = value.split_once('|').ok_or_else(bad)?;
    Ok(Consumer {
        name: ConsumerName::new(name).map_err(|_| bad())?,
        filter: TopicFilter::parse(filter).map_err(|_| bad())?,
        created_at: ms(created).ok_or_else(bad)?,
    })
}

/// The reply of one enqueue inside a caller's `MULTI` pipeline (see
/// [`crate::RedisStore::enqueue_in`]): decode the pipeline's result for that command into
/// this type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnqueueReply(pub Enqueued);

pub(crate) fn enqueued(v: &Value) -> Option<Enqueued> {
    let Value::Array(a) = v else { return None };
    let [id, n, dup] = a.as_slice() else {
        return None;
    };
    Some(Enqueued {
        message_id: MessageId::parse(&text(id)?).ok()?,
        deliveries: u32::try_from(int(n)?).ok()?,
        duplicate: int(dup)? == 1,
    })
}

impl FromRedisValue for EnqueueReply {
    fn from_redis_value(v: &Value) -> RedisResult<Self> {
        let bad = || {
            redis::RedisError::from((redis::ErrorKind::TypeError, "not an outbox enqueue reply"))
        };
        if let Value::ServerError(e) = v {
            return Err(e.clone().into());
        }
        let Value::Array(a) = v else {
            return Err(bad());
        };
        let [one] = a.as_slice() else {
            return Err(bad());
        };
        enqueued(one).map(EnqueueReply).ok_or_else(bad)
    }
}
