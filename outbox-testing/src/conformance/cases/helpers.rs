//! Small builders shared by the cases. Everything goes through the public store traits.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::Duration;

use outboxkit_core::{
    classify, AttemptContext, AttemptRecord, ClaimRequest, Claimed, Clock, Completion, Consumer,
    ConsumerName, Delivery, DeliveryFilter, DeliveryId, Endpoint, EndpointId, EndpointStatus,
    EndpointUrl, Enqueued, ErrorKind, Jitter, NewMessage, OsEntropy, Outcome, PageRequest, Result,
    RetryPolicy, SealedSecret, TenantId, Timestamp, Topic, TopicFilter, Verdict, VerdictPolicy,
};

use crate::conformance::Fixture;

/// The conveniences (`complete`, `purge_completed`) every case may call, in scope through
/// `use super::helpers::*`.
pub(super) use outboxkit_core::{DeliveryStoreExt as _, LedgerExt as _};

/// The lease every case claims with.
pub(super) const LEASE: Duration = Duration::from_secs(30);

/// `n` seconds.
pub(super) fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A tenant id.
pub(super) fn tenant(s: &str) -> TenantId {
    TenantId::new(s).expect("a valid tenant")
}

/// A topic.
pub(super) fn topic(s: &str) -> Topic {
    Topic::new(s).expect("a valid topic")
}

/// The current time of the fixture's clock.
pub(super) fn now(fx: &Fixture) -> Timestamp {
    fx.clock().now()
}

/// Register a consumer with a filter (`*`, `a.b`, `a.*`, comma-separated).
pub(super) async fn add_consumer(fx: &Fixture, name: &str, filter: &str) -> ConsumerName {
    let c = Consumer {
        name: ConsumerName::new(name).expect("a valid consumer name"),
        filter: TopicFilter::parse(filter).expect("a valid filter"),
        created_at: now(fx),
        status: outboxkit_core::ConsumerStatus::Active,
    };
    fx.store().put_consumer(&c).await.expect("put_consumer");
    c.name
}

/// An endpoint row (not stored) for `tenant` with `filter`.
pub(super) fn endpoint_row(fx: &Fixture, tenant_name: &str, filter: &str) -> Endpoint {
    let now = now(fx);
    let id = EndpointId::generate(now, &OsEntropy);
    Endpoint {
        id,
        tenant: tenant(tenant_name),
        url: EndpointUrl::parse("https://hooks.example.com/in").expect("a valid url"),
        description: "conformance endpoint".to_owned(),
        filter: TopicFilter::parse(filter).expect("a valid filter"),
        status: EndpointStatus::Active,
        secret: SealedSecret(vec![1, 2, 3, 4, 5, 6, 7, 8]),
        previous_secret: None,
        headers: vec![],
        body_format: Default::default(),
        rate_limit: None,
        fifo: false,
        last_delivery: None,
        created_at: now,
        updated_at: now,
    }
}

/// Create an endpoint with a status.
pub(super) async fn add_endpoint_with(
    fx: &Fixture,
    tenant_name: &str,
    filter: &str,
    status: EndpointStatus,
) -> Endpoint {
    let mut e = endpoint_row(fx, tenant_name, filter);
    e.status = status;
    fx.store()
        .create_endpoint(&e)
        .await
        .expect("create_endpoint");
    e
}

/// Create an active endpoint.
pub(super) async fn add_endpoint(fx: &Fixture, tenant_name: &str, filter: &str) -> Endpoint {
    add_endpoint_with(fx, tenant_name, filter, EndpointStatus::Active).await
}

/// A claim for one consumer with a budget of 10.
pub(super) fn for_consumer(name: &ConsumerName) -> ClaimRequest {
    ClaimRequest::new(100, LEASE).handler(name.clone(), 10)
}

/// A claim for webhooks with a budget of 6.
pub(super) fn for_webhooks() -> ClaimRequest {
    ClaimRequest::new(100, LEASE).webhooks(6)
}

/// A claim for e-mail with a budget of 6.
pub(super) fn for_email() -> ClaimRequest {
    ClaimRequest::new(100, LEASE).email(6)
}

/// Enqueue and expect success.
pub(super) async fn enqueue(fx: &Fixture, m: NewMessage) -> Enqueued {
    fx.store().enqueue(m).await.expect("enqueue")
}

/// A message of `topic` with a small JSON payload.
pub(super) fn msg(topic: &str) -> NewMessage {
    NewMessage::new(topic, serde_json::json!({ "n": 1 }))
}

/// Claim and expect success.
pub(super) async fn claim(fx: &Fixture, req: &ClaimRequest) -> Vec<Claimed> {
    fx.store().claim(req).await.expect("claim")
}

/// Claim and expect exactly one delivery.
pub(super) async fn claim_one(fx: &Fixture, req: &ClaimRequest) -> Claimed {
    let mut v = claim(fx, req).await;
    assert_eq!(
        v.len(),
        1,
        "expected exactly one claimed delivery, got {}",
        v.len()
    );
    v.remove(0)
}

/// Claim and expect nothing.
pub(super) async fn claim_none(fx: &Fixture, req: &ClaimRequest) {
    let v = claim(fx, req).await;
    assert!(
        v.is_empty(),
        "expected nothing to claim, got {} deliveries",
        v.len()
    );
}

/// The ids of claimed deliveries.
pub(super) fn ids(claims: &[Claimed]) -> BTreeSet<DeliveryId> {
    claims.iter().map(|c| c.delivery.id).collect()
}

/// Read one delivery.
pub(super) async fn delivery(fx: &Fixture, t: &TenantId, id: DeliveryId) -> Delivery {
    fx.store().get_delivery(t, id).await.expect("get_delivery")
}

/// Every delivery of a tenant matching `filter`, newest first (follows the cursor).
pub(super) async fn list_all(fx: &Fixture, t: &TenantId, filter: &DeliveryFilter) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut page = PageRequest::first(1000);
    loop {
        let p = fx
            .store()
            .list_deliveries(t, filter, page)
            .await
            .expect("list_deliveries");
        out.extend(p.items);
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => return out,
        }
    }
}

/// The single delivery of a tenant.
pub(super) async fn only_delivery(fx: &Fixture, t: &TenantId) -> Delivery {
    let mut all = list_all(fx, t, &DeliveryFilter::default()).await;
    assert_eq!(all.len(), 1, "expected one delivery for the tenant");
    all.remove(0)
}

/// The webhook default policy (1 m, 5 m, 30 m, 2 h, 12 h; no jitter).
pub(super) fn webhook_policy() -> VerdictPolicy {
    VerdictPolicy::new(RetryPolicy::webhook_default())
}

/// An exponential handler policy without jitter: 1 m, 2 m, 4 m ... cap 1 h, `max` attempts.
pub(super) fn handler_policy(max: u32) -> VerdictPolicy {
    let p = RetryPolicy::exponential(secs(60), 2.0, secs(3600), max)
        .expect("a valid policy")
        .with_jitter(Jitter::None);
    VerdictPolicy::new(p)
}

/// An HTTP outcome without `Retry-After`.
pub(super) fn http(status: u16) -> Outcome {
    Outcome::Http {
        status,
        retry_after: None,
    }
}

/// The ledger record of `outcome`, started at `started` and finished at `finished`.
pub(super) fn record(
    outcome: &Outcome,
    started: Timestamp,
    finished: Timestamp,
    excerpt: Option<&str>,
) -> Option<AttemptRecord> {
    outcome.attempt_outcome().map(|o| AttemptRecord {
        detail: None,
        started_at: started,
        finished_at: finished,
        outcome: o,
        status_code: outcome.status_code(),
        excerpt: excerpt.map(outboxkit_core::model::excerpt),
    })
}

/// Classify `outcome` for a claimed delivery with the real table, at `now`.
pub(super) fn judge(
    c: &Claimed,
    outcome: &Outcome,
    policy: &VerdictPolicy,
    now: Timestamp,
) -> Completion {
    let ctx = AttemptContext {
        attempt: c.lease.attempts,
        snoozes: c.lease.snoozes,
        probe: c.lease.is_probe(),
        now,
        jitter: 0.5,
    };
    Completion {
        verdict: classify(outcome, &ctx, policy),
        attempt: record(outcome, now, now, None),
    }
}

/// Classify and complete; returns the verdict written.
pub(super) async fn settle(
    fx: &Fixture,
    c: &Claimed,
    outcome: Outcome,
    policy: &VerdictPolicy,
) -> Verdict {
    let completion = judge(c, &outcome, policy, now(fx));
    fx.store()
        .complete(&c.lease, &completion)
        .await
        .expect("complete");
    completion.verdict
}

/// Complete with a verdict directly (no attempt record when `outcome` is `None`).
pub(super) async fn complete_with(
    fx: &Fixture,
    c: &Claimed,
    verdict: Verdict,
    outcome: Option<Outcome>,
) {
    let t = now(fx);
    let attempt = outcome.and_then(|o| record(&o, t, t, None));
    fx.store()
        .complete(&c.lease, &Completion { verdict, attempt })
        .await
        .expect("complete");
}

/// Assert that `r` failed with `kind`.
pub(super) fn assert_kind<T: Debug>(r: Result<T>, kind: ErrorKind, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected a {kind} error, got Ok({v:?})"),
        Err(e) => assert_eq!(e.kind(), kind, "{what}: wrong error kind ({e})"),
    }
}
