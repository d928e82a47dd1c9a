//! Enqueueing numbered messages, waiting for the queue to drain, and proving that nothing
//! was lost: every delivery in the ledger reached the receiver, duplicates of one message
//! carry one `webhook-id`, and nothing is left pending, processing or held.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use outboxkit_core::{
    Delivery, DeliveryFilter, DeliveryStatus, NewMessage, PageRequest, Stats, Stopwatch, Store,
    TenantId,
};
use outboxkit_testing::ReceivedRequest;

/// Enqueue messages `range` on `topic`, `batch` per `enqueue_batch`, each carrying its
/// sequence number and `marker`.
pub async fn enqueue_numbered(
    store: &dyn Store,
    topic: &str,
    range: std::ops::Range<u64>,
    batch: usize,
    marker: &str,
) {
    let seqs: Vec<u64> = range.collect();
    for chunk in seqs.chunks(batch.max(1)) {
        let messages: Vec<NewMessage> = chunk
            .iter()
            .map(|i| NewMessage::new(topic, serde_json::json!({ "seq": i, "marker": marker })))
            .collect();
        let mut tries = 0;
        loop {
            match store.enqueue_batch(messages.clone()).await {
                Ok(r) => {
                    assert_eq!(r.len(), chunk.len());
                    break;
                }
                Err(e) if e.is_retryable() && tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("enqueue failed: {e} ({e:?})"),
            }
        }
    }
}

/// Every delivery of `tenant`, newest first.
pub async fn all_deliveries(store: &dyn Store, tenant: &TenantId) -> Vec<Delivery> {
    let mut out = Vec::new();
    let mut page = PageRequest::first(1000);
    for _ in 0..10_000 {
        let p = store
            .list_deliveries(tenant, &DeliveryFilter::default(), page)
            .await
            .expect("list deliveries");
        out.extend(p.items);
        match p.next {
            Some(c) => page.cursor = Some(c),
            None => break,
        }
    }
    out
}

/// The stats, retrying a transient failure (a cut connection, a locked database).
pub async fn stats(store: &dyn Store) -> Stats {
    for _ in 0..100 {
        match store.stats().await {
            Ok(s) => return s,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("stats failed: {e}"),
        }
    }
    panic!("stats kept failing")
}

/// Whether every one of `total` deliveries is finished (`succeeded` or `dead`).
pub fn drained(s: &Stats, total: u64) -> bool {
    s.succeeded + s.dead == total
        && s.pending == 0
        && s.processing == 0
        && s.sending == 0
        && s.held == 0
}

/// Poll until [`drained`] or `timeout`; returns the last stats and whether it drained.
pub async fn wait_drained(store: &dyn Store, total: u64, timeout: Duration) -> (Stats, bool) {
    let clock = Stopwatch::start();
    loop {
        let s = stats(store).await;
        if drained(&s, total) {
            return (s, true);
        }
        if clock.elapsed() > timeout {
            return (s, false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `data` object of an envelope body.
pub fn data_of(body: &[u8]) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("data").cloned()
}

/// What the receiver saw, checked against the ledger.
#[derive(Debug, Default)]
pub struct Delivered {
    pub requests: usize,
    pub duplicates: usize,
    pub max_copies: usize,
    pub max_attempts: u32,
}

/// Check at-least-once delivery of messages `0..n` (one endpoint, so one delivery each):
/// every delivery `succeeded`, every one reached the receiver with a valid signature, the
/// `webhook-id` of every request is a delivery id, every copy of one message carries the same
/// `webhook-id` and the same data, and every message number arrived.
pub fn check_at_least_once(
    n: u64,
    deliveries: &[Delivery],
    requests: &[ReceivedRequest],
    marker: &str,
) -> Delivered {
    assert_eq!(deliveries.len() as u64, n, "one delivery per message");
    let bad: Vec<_> = deliveries
        .iter()
        .filter(|d| d.status != DeliveryStatus::Succeeded)
        .map(|d| (d.id, d.status, d.attempts, d.dead_reason))
        .take(10)
        .collect();
    assert!(bad.is_empty(), "deliveries not succeeded: {bad:?}");
    let ids: BTreeSet<String> = deliveries.iter().map(|d| d.id.to_string()).collect();
    let mut by_id: BTreeMap<String, Vec<&ReceivedRequest>> = BTreeMap::new();
    let mut ids_by_seq: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for r in requests {
        assert!(r.verified(), "a request failed signature verification");
        let id = r
            .webhook_id
            .clone()
            .expect("every request has a webhook-id");
        assert!(
            ids.contains(&id),
            "webhook-id {id} is no delivery of this run"
        );
        let data = data_of(&r.body).expect("an envelope body");
        assert_eq!(data["marker"], marker, "a request of another run");
        let seq = data["seq"].as_u64().expect("a sequence number");
        ids_by_seq.entry(seq).or_default().insert(id.clone());
        by_id.entry(id).or_default().push(r);
    }
    let missing: Vec<&String> = ids.iter().filter(|i| !by_id.contains_key(*i)).collect();
    assert!(
        missing.is_empty(),
        "{} deliveries never reached the receiver (first: {:?})",
        missing.len(),
        missing.first()
    );
    for seq in 0..n {
        let got = ids_by_seq.get(&seq).map_or(0, BTreeSet::len);
        assert_eq!(got, 1, "message {seq} arrived under {got} webhook-ids");
    }
    for (id, copies) in &by_id {
        let first = data_of(&copies[0].body);
        for c in copies {
            assert_eq!(data_of(&c.body), first, "copies of {id} differ");
        }
    }
    Delivered {
        requests: requests.len(),
        duplicates: requests.len() - by_id.len(),
        max_copies: by_id.values().map(Vec::len).max().unwrap_or(0),
        max_attempts: deliveries.iter().map(|d| d.attempts).max().unwrap_or(0),
    }
}

/// Wait until the receiver has seen `n` requests more than `from`, up to `timeout`; returns
/// how long it took.
pub async fn time_until_received(
    receiver: &outboxkit_testing::WebhookReceiver,
    from: usize,
    n: usize,
    timeout: Duration,
) -> Option<Duration> {
    let clock = Stopwatch::start();
    receiver
        .wait_for(from + n, timeout)
        .await
        .then(|| clock.elapsed())
}
