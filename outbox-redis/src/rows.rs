//! Encoding script arguments and decoding script replies.
//!
//! Deliveries and messages are stored packed into a few hash fields (the layout is described
//! in `scripts/common.lua`); endpoints as one hash field per value.

use std::collections::{BTreeMap, HashMap};

use outboxkit_core::endpoint_headers::{decode_headers, encode_headers};
use outboxkit_core::{
    AttemptRecord, BodyFormat, Cause, ClaimToken, Consumer, ConsumerName, DeadReason, Delivery,
    DeliveryId, DeliveryStatus, Destination, Endpoint, EndpointId, EndpointStatus, EndpointUrl,
    Enqueued, IdempotencyKey, LastDelivery, LastOutcome, Message, MessageId, OrderingKey, Result,
    SealedSecret, TenantId, Timestamp, Topic, TopicFilter,
};
use redis::{FromRedisValue, ParsingError, Value};

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
    str_of(v).map(|s| s.into_owned())
}

/// The text of a reply item without copying it when it is a bulk string.
pub(crate) fn str_of(v: &Value) -> Option<std::borrow::Cow<'_, str>> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(std::borrow::Cow::Borrowed),
        Value::SimpleString(s) => Some(std::borrow::Cow::Borrowed(s.as_str())),
        Value::Int(i) => Some(std::borrow::Cow::Owned(i.to_string())),
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

/// Exactly `N` parts of `s` separated by `sep` (the last one takes the rest).
pub(crate) fn split<const N: usize>(s: &str, sep: char) -> Result<[&str; N], ()> {
    let mut out = [""; N];
    let mut parts = s.splitn(N, sep);
    for slot in &mut out {
        *slot = parts.next().ok_or(())?;
    }
    Ok(out)
}

/// Drop an error's detail: a stored value that does not parse is corrupt, whatever the
/// reason.
fn ok<T>(r: Result<T>) -> Result<T, ()> {
    r.map_err(|_| ())
}

pub(crate) fn opt_ms(s: &str) -> Result<Option<Timestamp>, ()> {
    if s.is_empty() {
        Ok(None)
    } else {
        ms(s).map(Some).ok_or(())
    }
}

/// The separator of packed fields (the ASCII unit separator, which no stored name, key or
/// json text contains).
pub(crate) const SEP: char = '\x1f';

/// A delivery's packed hot fields: `status|attempts|next|token|updated`.
pub(crate) fn pack_h(
    status: DeliveryStatus,
    attempts: u32,
    next: Timestamp,
    token: Option<&ClaimToken>,
    updated: Timestamp,
) -> String {
    format!(
        "{}|{attempts}|{}|{}|{}",
        status.as_str(),
        next.as_unix_millis(),
        token.map(token_arg).unwrap_or_default(),
        updated.as_unix_millis()
    )
}

/// A delivery's packed other fields: `snoozes|completed|dead`.
pub(crate) fn pack_v(
    snoozes: u32,
    completed: Option<Timestamp>,
    dead: Option<DeadReason>,
) -> String {
    format!(
        "{snoozes}|{}|{}",
        completed
            .map(|t| t.as_unix_millis().to_string())
            .unwrap_or_default(),
        dead.map(|d| d.as_str()).unwrap_or_default()
    )
}

/// A delivery from its `h`, `s`, `v`, `l` and `r` fields (see `scripts/common.lua`; `r`,
/// the run, is absent before the first replay and on rows written before it was kept).
pub(crate) fn delivery(v: &[Value]) -> Result<Delivery> {
    decode_delivery(v).map_err(|()| corrupt("delivery"))
}

fn decode_delivery(v: &[Value]) -> Result<Delivery, ()> {
    let field = |i: usize| v.get(i).and_then(str_of).ok_or(());
    let (h, s, rest) = (field(0)?, field(1)?, field(2)?);
    let last = v.get(3).and_then(str_of).filter(|l| !l.is_empty());
    let run = match v.get(4).and_then(str_of) {
        Some(r) => r.parse().map_err(|_| ())?,
        None => 1,
    };
    let [status, attempts, next, token, updated] = split::<5>(&h, '|')?;
    let [member, mid, tenant, topic, kind, target, created, okey] = split::<8>(&s, SEP)?;
    let [snoozes, completed, dead] = split::<3>(&rest, '|')?;
    let next = ms(next).ok_or(())?;
    Ok(Delivery {
        id: ok(DeliveryId::parse(member.get(15..).ok_or(())?))?,
        message_id: ok(MessageId::parse(mid))?,
        tenant: ok(TenantId::new(tenant))?,
        topic: ok(Topic::new(topic))?,
        ordering_key: if okey.is_empty() {
            None
        } else {
            Some(ok(OrderingKey::new(okey))?)
        },
        destination: ok(Destination::from_parts(kind, target))?,
        status: ok(DeliveryStatus::parse(status))?,
        attempts: attempts.parse().map_err(|_| ())?,
        snoozes: snoozes.parse().map_err(|_| ())?,
        next_attempt_at: next,
        // A claimed row's next attempt is its lease end.
        lease_until: (!token.is_empty()).then_some(next),
        last_outcome: last
            .map(|l| serde_json::from_str::<LastOutcome>(&l).map_err(|_| ()))
            .transpose()?,
        dead_reason: if dead.is_empty() {
            None
        } else {
            Some(ok(DeadReason::parse(dead))?)
        },
        created_at: ms(created).ok_or(())?,
        updated_at: ms(updated).ok_or(())?,
        completed_at: opt_ms(completed)?,
        run,
    })
}

/// Whether a delivery or message read found a stored hash (its first field is present).
pub(crate) fn exists(v: &[Value]) -> bool {
    v.first().is_some_and(|f| !matches!(f, Value::Nil))
}

/// A message's packed fields (`x`): id, topic, tenant, ordering key, idempotency key,
/// available at, created at, headers json, cause json.
pub(crate) fn pack_message(m: &Message) -> Result<String> {
    let headers = if m.headers.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&m.headers).map_err(|_| corrupt("message"))?
    };
    let cause = match &m.cause {
        Some(c) => serde_json::to_string(c).map_err(|_| corrupt("message"))?,
        None => String::new(),
    };
    Ok([
        m.id.to_string(),
        m.topic.to_string(),
        m.tenant.to_string(),
        m.ordering_key
            .as_ref()
            .map(|k| k.to_string())
            .unwrap_or_default(),
        m.idempotency_key
            .as_ref()
            .map(|k| k.to_string())
            .unwrap_or_default(),
        m.available_at.as_unix_millis().to_string(),
        m.created_at.as_unix_millis().to_string(),
        headers,
        cause,
    ]
    .join("\x1f"))
}

/// A message from its `p` (payload) and `x` (packed) fields.
pub(crate) fn message(payload: Value, packed: &Value) -> Result<Message> {
    decode_message(payload, packed).map_err(|()| corrupt("message"))
}

/// The payload is moved out of its reply item, not copied.
fn decode_message(payload: Value, packed: &Value) -> Result<Message, ()> {
    let Value::BulkString(payload) = payload else {
        return Err(());
    };
    let x = str_of(packed).ok_or(())?;
    let [id, topic, tenant, okey, ikey, avail, created, headers, cause] = split::<9>(&x, SEP)?;
    Ok(Message {
        id: ok(MessageId::parse(id))?,
        topic: ok(Topic::new(topic))?,
        payload,
        tenant: ok(TenantId::new(tenant))?,
        ordering_key: (!okey.is_empty())
            .then(|| ok(OrderingKey::new(okey)))
            .transpose()?,
        idempotency_key: (!ikey.is_empty())
            .then(|| ok(IdempotencyKey::new(ikey)))
            .transpose()?,
        available_at: ms(avail).ok_or(())?,
        headers: if headers.is_empty() {
            BTreeMap::new()
        } else {
            serde_json::from_str(headers).map_err(|_| ())?
        },
        cause: (!cause.is_empty())
            .then(|| serde_json::from_str::<Cause>(cause).map_err(|_| ()))
            .transpose()?,
        created_at: ms(created).ok_or(())?,
    })
}

/// The lease token, in the short form the scripts store.
pub(crate) fn token_arg(t: &ClaimToken) -> String {
    t.as_uuid().simple().to_string()
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
    if e.fifo {
        f.push(("fifo", b"1".to_vec()));
    }
    if !e.headers.is_empty() {
        f.push(("hdrs", encode_headers(&e.headers).into_bytes()));
    }
    f
}

/// The optional endpoint fields, deleted when absent on update (`hdrs`, the custom headers,
/// is absent on endpoints written before they existed and on those without any).
pub(crate) const ENDPOINT_OPTIONAL: [&str; 5] = ["reason", "prev", "rate", "fifo", "hdrs"];

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
        headers: decode_headers(&opt("hdrs").unwrap_or_default()).map_err(|_| bad())?,
        body_format: BodyFormat::parse(&s("body")?).map_err(|_| bad())?,
        rate_limit: opt("rate")
            .map(|r| r.parse().map_err(|_| bad()))
            .transpose()?,
        fifo: opt("fifo").is_some_and(|f| f == "1"),
        last_delivery: match h.get("last") {
            Some(json) => Some(LastDelivery::from(
                &serde_json::from_slice::<AttemptRecord>(json).map_err(|_| bad())?,
            )),
            None => None,
        },
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
        status: outboxkit_core::ConsumerStatus::Active,
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
    fn from_redis_value_ref(v: &Value) -> Result<Self, ParsingError> {
        let bad = || ParsingError::from("not an outbox enqueue reply".to_owned());
        // A pipeline's failed command is an error before any reply is decoded; only a
        // pipeline with `ignore_errors` hands one over as a value.
        if let Value::ServerError(e) = v {
            return Err(ParsingError::from(format!("the enqueue failed: {e}")));
        }
        let Value::Array(a) = v else {
            return Err(bad());
        };
        let [one] = a.as_slice() else {
            return Err(bad());
        };
        enqueued(one).map(EnqueueReply).ok_or_else(bad)
    }

    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Self::from_redis_value_ref(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_delivery_without_a_run_field_is_in_its_first_run() {
        let s = format!(
            "0000000000000010190a000-0000-7000-8000-000000000002{SEP}0190a000-0000-7000-8000-000000000001{SEP}acme{SEP}order.created{SEP}handler{SEP}worker{SEP}1700000000000{SEP}"
        );
        let row = [
            bulk("pending|0|1700000000000||1700000000000"),
            bulk(&s),
            bulk("0||"),
            Value::Nil,
        ];
        assert_eq!(delivery(&row).unwrap().run, 1);
        let mut with_run = row.to_vec();
        with_run.push(bulk("4"));
        assert_eq!(delivery(&with_run).unwrap().run, 4);
    }
}
