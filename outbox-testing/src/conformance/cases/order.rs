//! The claim rules of `outboxkit_core::claim_rules`, pinned on every store: the claims of
//! random backlogs are exactly what core's fair rounds and per-key barrier say, and one
//! exhausted-row bound holds for every store.

use std::collections::{BTreeMap, BTreeSet};

use outboxkit_core::claim_rules::{fair_order, EXHAUSTED_PER_CLAIM};
use outboxkit_core::{
    ClaimRequest, Claimed, Completion, ConsumerName, DeadReason, DeliveryFilter, DeliveryId,
    DeliveryStatus, NewMessage, TenantId, Timestamp, Verdict, MAX_BATCH,
};

use super::helpers::*;
use crate::conformance::Fixture;

/// A small seeded generator (SplitMix64), so a failing backlog is reproduced by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One delivery of the reference: its group, ordering key, due time and whether it is
/// still unfinished / claimable.
struct Row {
    id: DeliveryId,
    group: (TenantId, usize),
    key: Option<String>,
    due: Timestamp,
    claimed: bool,
    done: bool,
}

/// What core's rules say one claim of `batch` takes from `rows`: each group's claimable
/// rows (not claimed, not blocked by an older unfinished row of their key) in due order,
/// cut to the batch, groups ordered by their first such row, taken in fair rounds.
fn expected(rows: &[Row], batch: usize) -> BTreeSet<DeliveryId> {
    let mut groups: BTreeMap<&(TenantId, usize), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups.entry(&r.group).or_default().push(r);
    }
    let mut heads = Vec::new();
    for members in groups.values_mut() {
        members.sort_by_key(|r| r.due);
        let mut open_keys = BTreeSet::new();
        let mut take = Vec::new();
        for r in members.iter() {
            let blocked = r.key.as_ref().is_some_and(|k| open_keys.contains(k));
            if let (Some(k), false) = (&r.key, r.done) {
                open_keys.insert(k.clone());
            }
            if !r.claimed && !r.done && !blocked && take.len() < batch {
                take.push(r);
            }
        }
        if let Some(first) = take.first() {
            heads.push((first.due, take.iter().map(|r| r.id).collect::<Vec<_>>()));
        }
    }
    fair_order(heads, batch).into_iter().collect()
}

/// Complete `claims` as succeeded, in one `complete_many`; each must be accepted.
async fn succeed<'a>(fx: &Fixture, claims: impl IntoIterator<Item = &'a Claimed>) {
    let items: Vec<_> = claims
        .into_iter()
        .map(|c| {
            let completion = Completion {
                verdict: Verdict::Succeeded,
                attempt: None,
            };
            (c.lease.clone(), completion)
        })
        .collect();
    for r in fx.store().complete_many(&items).await.expect("complete") {
        r.expect("each completion is accepted");
    }
}

/// Random backlogs over two tenants × three consumers, some with ordering keys: every
/// claim (random batch sizes, some claimed rows completed in between) takes exactly the
/// rows core's `fair_order` and barrier pick — the same set, on every store.
pub async fn claim_order_follows_the_fair_rounds(fx: Fixture) {
    let mut consumers: Vec<ConsumerName> = Vec::new();
    for i in 0..3 {
        consumers.push(add_consumer(&fx, &format!("w{i}"), &format!("t{i}.*")).await);
    }
    let tenants = [tenant("north"), tenant("south")];
    let req = |batch: u32| {
        consumers
            .iter()
            .fold(ClaimRequest::new(batch, LEASE), |r, c| {
                r.handler(c.clone(), 100)
            })
    };
    let mut rng = Rng(0x5eed_0c1a_1e00_0001);
    for round in 0..4 {
        let mut rows: Vec<Row> = Vec::new();
        let n = 12 + rng.below(20);
        for _ in 0..n {
            fx.clock().advance(std::time::Duration::from_millis(1));
            let (t, c) = (rng.below(2) as usize, rng.below(3) as usize);
            let mut m: NewMessage = msg(&format!("t{c}.item")).tenant(tenants[t].as_str());
            let key = (rng.below(3) == 0).then(|| format!("k{}", rng.below(2)));
            if let Some(k) = &key {
                m = m.ordering_key(k.clone());
            }
            let e = enqueue(&fx, m).await;
            let d = list_all(&fx, &tenants[t], &DeliveryFilter::default())
                .await
                .into_iter()
                .find(|d| d.message_id == e.message_id)
                .expect("the message fanned out to its consumer");
            rows.push(Row {
                id: d.id,
                group: (tenants[t].clone(), c),
                key,
                due: d.next_attempt_at,
                claimed: false,
                done: false,
            });
        }
        for step in 0..40 {
            let batch = 1 + rng.below(6) as usize;
            let want = expected(&rows, batch);
            let got = fx.store().claim(&req(batch as u32)).await.expect("claim");
            let got_ids: BTreeSet<DeliveryId> = got.iter().map(|c| c.delivery.id).collect();
            assert_eq!(
                got_ids, want,
                "backlog {round}, claim {step} (batch {batch}): the store's claim differs \
                 from core's fair rounds"
            );
            for r in rows.iter_mut().filter(|r| want.contains(&r.id)) {
                r.claimed = true;
            }
            // Finish a random half of what this claim took: its keys open for the next.
            let finish: Vec<_> = got.iter().filter(|_| rng.below(2) == 0).collect();
            succeed(&fx, finish.iter().copied()).await;
            for c in &finish {
                if let Some(r) = rows.iter_mut().find(|r| r.id == c.delivery.id) {
                    r.done = true;
                }
            }
            if got.is_empty() && rows.iter().all(|r| r.claimed) {
                break;
            }
        }
        // The rest finish (a key's later rows wait for its earlier ones), so the next
        // backlog starts from nothing.
        fx.clock().advance(LEASE * 4);
        loop {
            let leftover = fx.store().claim(&req(MAX_BATCH)).await.expect("claim");
            if leftover.is_empty() {
                break;
            }
            succeed(&fx, &leftover).await;
        }
    }
}

/// More exhausted rows than one claim may kill: the first claim kills at least
/// `EXHAUSTED_PER_CLAIM` of them (the one bound every store keeps) and hands none out,
/// and the next claim kills the rest.
pub async fn successive_claims_kill_every_exhausted_row(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    let n = EXHAUSTED_PER_CLAIM + 40;
    let batch: Vec<NewMessage> = (0..n)
        .map(|i| msg("order.created").ordering_key(format!("k{i}")))
        .collect();
    for chunk in batch.chunks(MAX_BATCH as usize) {
        fx.store()
            .enqueue_batch(chunk.to_vec())
            .await
            .expect("enqueue");
    }
    let spend = ClaimRequest::new(MAX_BATCH, LEASE).handler(c.clone(), 1);
    let mut taken = 0;
    while taken < n {
        let got = claim(&fx, &spend).await;
        assert!(!got.is_empty(), "every row is claimed once");
        taken += got.len();
    }
    // Every lease ends with the single attempt spent: all `n` rows are exhausted.
    fx.clock().advance(LEASE + secs(1));
    let fresh = enqueue(&fx, msg("order.shipped")).await;
    let one = ClaimRequest::new(1, LEASE).handler(c, 1);
    let got = claim_one(&fx, &one).await;
    assert_eq!(
        got.delivery.message_id, fresh.message_id,
        "no exhausted row is handed out"
    );
    let dead = |fx: Fixture| async move {
        let filter = DeliveryFilter {
            status: Some(DeliveryStatus::Dead),
            ..DeliveryFilter::default()
        };
        let rows = list_all(&fx, &TenantId::default(), &filter).await;
        assert!(rows
            .iter()
            .all(|d| d.dead_reason == Some(DeadReason::MaxAttempts) && d.attempts == 1));
        rows.len()
    };
    let first = dead(fx.clone()).await;
    assert!(
        first >= EXHAUSTED_PER_CLAIM.min(n),
        "one claim kills at least the bound's worth of exhausted rows ({first} of {n})"
    );
    claim_none(&fx, &one).await;
    assert_eq!(
        dead(fx.clone()).await,
        n,
        "the next claim kills the rest: every exhausted row is dead"
    );
}
