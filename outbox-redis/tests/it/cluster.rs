//! A local three-node Redis Cluster (`tests/support/cluster.rs`) with the outbox over three
//! shards: every key of a shard sits in its shard's slot (no script crosses slots), per-key
//! order holds across shards, and a node restart loses nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    Clock, DeliveryStore, EntropyExt, ErrorKind, Ledger, MessageStore, NewMessage, OsEntropy,
    PageRequest, RetentionCutoffs,
};
use outboxkit_redis::{RedisConfig, RedisStore};
use outboxkit_testing::ManualClock;

use crate::common::{add_worker, claim_request, succeeded};
use crate::support::{self, Cluster};

async fn cluster_store(c: &Cluster, prefix: &str, clock: Arc<dyn Clock>) -> RedisStore {
    let mut config = RedisConfig::with_prefix(prefix);
    config.shards = 3;
    let urls = c.urls();
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    RedisStore::new_cluster(&nodes, config, clock, Arc::new(OsEntropy))
        .await
        .expect("a cluster store")
}

/// Every key under `stem` on every node, with the node's port.
fn cluster_keys(c: &Cluster, stem: &str) -> Vec<(u16, String)> {
    let mut out = Vec::new();
    for &p in &c.ports {
        let listed =
            support::cli(p, &["--scan", "--pattern", &format!("{stem}*")]).unwrap_or_default();
        out.extend(
            listed
                .lines()
                .filter(|l| !l.is_empty())
                .map(|k| (p, k.to_owned())),
        );
    }
    out
}

fn slot(c: &Cluster, key: &str) -> u16 {
    support::cli(c.ports[0], &["CLUSTER", "KEYSLOT", key])
        .and_then(|s| s.parse().ok())
        .expect("a slot")
}

fn cleanup(c: &Cluster, stem: &str) {
    for (p, k) in cluster_keys(c, stem) {
        let _ = support::cli(p, &["DEL", &k]);
    }
}

fn new_prefix() -> (String, String) {
    let stem = format!("{{outbox-cluster-{:016x}", OsEntropy.next_u64());
    (format!("{stem}}}"), stem)
}

fn ready() -> bool {
    if support::available() {
        return true;
    }
    assert!(
        !outboxkit_testing::conformance::require_backends(),
        "redis-server is not installed"
    );
    eprintln!("skipping: redis-server is not installed");
    false
}

/// A workload that runs every script (enqueue with and without keys, claim, complete,
/// release, operator calls, listings, stats, tenants, purge) succeeds, and every key it
/// leaves sits in the slot of its shard's prefix: no script touched another slot.
#[tokio::test]
async fn every_key_of_a_shard_is_in_its_slot() {
    if !ready() {
        return;
    }
    let c = support::cluster("main");
    let (prefix, stem) = new_prefix();
    let clock = ManualClock::new();
    let s = cluster_store(c, &prefix, clock.clone()).await;
    add_worker(&s, clock.as_ref()).await;
    for i in 0..60 {
        let mut m = NewMessage::new("job.run", serde_json::json!({ "n": i }))
            .tenant(format!("t{}", i % 4).as_str());
        if i % 2 == 0 {
            m = m.ordering_key(format!("k{}", i % 7).as_str());
        }
        s.enqueue(m).await.expect("enqueue");
    }
    let got = s.claim(&claim_request(30)).await.expect("claim");
    let (done, back) = got.split_at(20);
    let items: Vec<_> = done
        .iter()
        .map(|c| (c.lease.clone(), succeeded()))
        .collect();
    for r in s.complete_many(&items).await.expect("complete") {
        r.expect("a live lease completes");
    }
    let leases: Vec<_> = back.iter().map(|c| c.lease.clone()).collect();
    s.release(&leases, Duration::ZERO).await.expect("release");
    let t0 = outboxkit_core::TenantId::new("t0").expect("tenant");
    let page = s
        .list_deliveries(&t0, &Default::default(), PageRequest::first(100))
        .await
        .expect("list");
    assert!(!page.items.is_empty());
    s.retry_now(&t0, page.items[0].id).await.ok();
    assert_eq!(s.stats().await.expect("stats").total(), 60);
    assert_eq!(s.tenants().await.expect("tenants").len(), 4);
    clock.advance(Duration::from_secs(3600));
    let cut = RetentionCutoffs::uniform(clock.now());
    s.purge_expired(&cut, 100).await.expect("purge");

    let keys = cluster_keys(c, &stem);
    let shards: Vec<String> = (0..3).map(|i| s.config().shard_prefix(i)).collect();
    let slots: Vec<u16> = shards.iter().map(|p| slot(c, p)).collect();
    assert_eq!(
        slots.iter().collect::<BTreeSet<_>>().len(),
        3,
        "three shards, three slots"
    );
    let mut used = BTreeSet::new();
    for (_, k) in &keys {
        let shard = shards
            .iter()
            .rposition(|p| k.starts_with(p.as_str()))
            .unwrap_or_else(|| panic!("{k} is under no shard prefix"));
        assert_eq!(slot(c, k), slots[shard], "{k} is in its shard's slot");
        used.insert(shard);
    }
    assert!(used.len() > 1, "the messages spread over several shards");
    cleanup(c, &stem);
}

/// Messages of several ordering keys, spread over the shards, are claimed in enqueue order
/// per key (each claim's batch, completed before the next).
#[tokio::test]
async fn order_holds_per_key_across_shards() {
    if !ready() {
        return;
    }
    let c = support::cluster("main");
    let (prefix, stem) = new_prefix();
    let clock = ManualClock::new();
    let s = cluster_store(c, &prefix, clock.clone()).await;
    add_worker(&s, clock.as_ref()).await;
    let mut sent: BTreeMap<String, Vec<outboxkit_core::MessageId>> = BTreeMap::new();
    for i in 0..90 {
        let key = format!("order-{}", i % 9);
        let m = NewMessage::new("order.changed", serde_json::json!({ "n": i }))
            .ordering_key(key.as_str());
        sent.entry(key)
            .or_default()
            .push(s.enqueue(m).await.expect("enqueue").message_id);
    }
    let mut seen: BTreeMap<String, Vec<outboxkit_core::MessageId>> = BTreeMap::new();
    loop {
        let got = s.claim(&claim_request(7)).await.expect("claim");
        if got.is_empty() {
            break;
        }
        for g in &got {
            let key = g.message.ordering_key.as_ref().expect("a key").to_string();
            seen.entry(key).or_default().push(g.message.id);
        }
        let items: Vec<_> = got.into_iter().map(|c| (c.lease, succeeded())).collect();
        for r in s.complete_many(&items).await.expect("complete") {
            r.expect("a live lease completes");
        }
    }
    assert_eq!(seen, sent, "every key's messages, in enqueue order");
    let shards: BTreeSet<usize> = cluster_keys(c, &stem)
        .iter()
        .filter_map(|(_, k)| {
            (0..3)
                .rev()
                .find(|&i| k.starts_with(&s.config().shard_prefix(i as u16)))
        })
        .collect();
    assert!(shards.len() > 1, "the keys spread over several shards");
    cleanup(c, &stem);
}

/// A node (with `appendfsync always`) restarts in the middle of a run: the calls that fail
/// while it is down are retried, and at the end every message was delivered and nothing is
/// left or lost.
#[tokio::test]
async fn a_node_restart_loses_nothing() {
    if !ready() {
        return;
    }
    let c = support::cluster("spare");
    let (prefix, stem) = new_prefix();
    let clock = ManualClock::new();
    let s = cluster_store(c, &prefix, clock.clone()).await;
    add_worker(&s, clock.as_ref()).await;
    const N: u64 = 300;
    for i in 0..N {
        let m = NewMessage::new("job.run", serde_json::json!({ "n": i }))
            .ordering_key(format!("k{i}").as_str());
        s.enqueue(m).await.expect("enqueue");
    }
    let mut restarted = false;
    let mut done = 0;
    let mut idle = 0;
    while idle < 3 {
        if !restarted && done >= N / 3 {
            let port = c.ports[1];
            tokio::task::spawn_blocking(move || support::cluster("spare").restart(port))
                .await
                .expect("restart");
            restarted = true;
        }
        let got = match s.claim(&claim_request(25)).await {
            Ok(g) => g,
            Err(e) if e.kind() == ErrorKind::Unavailable || e.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => panic!("claim: {e:?}"),
        };
        if got.is_empty() {
            // Rows whose claim reply was lost come back when their lease ends.
            idle += 1;
            clock.advance(Duration::from_secs(61));
            continue;
        }
        idle = 0;
        let items: Vec<_> = got.into_iter().map(|c| (c.lease, succeeded())).collect();
        match s.complete_many(&items).await {
            Ok(r) => done += r.iter().filter(|r| r.is_ok()).count() as u64,
            Err(e) if e.kind() == ErrorKind::Unavailable || e.is_retryable() => {}
            Err(e) => panic!("complete: {e:?}"),
        }
    }
    assert!(restarted, "the node was restarted mid-run");
    let stats = loop {
        match s.stats().await {
            Ok(st) => break st,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert_eq!((stats.succeeded, stats.total()), (N, N), "{stats:?}");
    cleanup(c, &stem);
}
