//! Tenant-scoped retention (purge of one tenant, per-tenant windows), tenant-scoped stats and
//! the tenant listing.

use outboxkit_core::{ConsumerName, DeliveryFilter, ErrorKind, RetentionPolicy, TenantId, Verdict};

use super::helpers::*;
use crate::conformance::Fixture;

/// Enqueue `n` messages for each tenant and finish every delivery as succeeded.
async fn finished(fx: &Fixture, c: &ConsumerName, tenants: &[(&str, usize)]) {
    for (name, n) in tenants {
        for _ in 0..*n {
            enqueue(fx, msg("order.created").tenant(*name)).await;
        }
    }
    for got in claim(fx, &for_consumer(c)).await {
        complete_with(fx, &got, Verdict::Succeeded, None).await;
    }
}

async fn left(fx: &Fixture, name: &str) -> usize {
    list_all(fx, &tenant(name), &DeliveryFilter::default())
        .await
        .len()
}

/// `purge_tenant` removes only the named tenant's finished deliveries and messages, and
/// leaves the rotation cursor where it was.
pub async fn purge_tenant_touches_only_its_tenant(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    finished(&fx, &c, &[("t-a", 2), ("t-b", 3), ("t-c", 1)]).await;
    let orphan_b = enqueue(&fx, msg("nothing.matches").tenant("t-b")).await;
    let orphan_c = enqueue(&fx, msg("nothing.matches").tenant("t-c")).await;
    fx.clock().advance(secs(60));
    let cutoff = now(&fx);

    let r = fx
        .store()
        .purge_tenant(&tenant("t-b"), cutoff, 100)
        .await
        .expect("purge_tenant");
    assert_eq!(
        (r.tenant, r.deliveries, r.messages),
        (Some(tenant("t-b")), 3, 4)
    );
    assert_eq!(left(&fx, "t-b").await, 0);
    assert_kind(
        fx.store()
            .get_message(&tenant("t-b"), orphan_b.message_id)
            .await,
        ErrorKind::NotFound,
        "t-b's message without deliveries",
    );
    assert_eq!((left(&fx, "t-a").await, left(&fx, "t-c").await), (2, 1));
    fx.store()
        .get_message(&tenant("t-c"), orphan_c.message_id)
        .await
        .expect("another tenant's message is kept");

    let again = fx
        .store()
        .purge_tenant(&tenant("t-b"), cutoff, 100)
        .await
        .expect("purge_tenant again");
    assert_eq!((again.deliveries, again.messages), (0, 0));
    let none = fx
        .store()
        .purge_tenant(&tenant("nobody"), cutoff, 100)
        .await
        .expect("an unknown tenant");
    assert_eq!((none.deliveries, none.messages), (0, 0));
    assert_kind(
        fx.store().purge_tenant(&tenant("t-a"), cutoff, 0).await,
        ErrorKind::InvalidInput,
        "limit 0",
    );
    assert_eq!(left(&fx, "t-a").await, 2, "a refused purge removes nothing");

    // The rotation did not move: it starts at the first tenant, not after `t-b`.
    let first = fx
        .store()
        .purge_completed(cutoff, 100)
        .await
        .expect("purge");
    assert_eq!(first.tenant, Some(tenant("t-a")));
    let second = fx
        .store()
        .purge_completed(cutoff, 100)
        .await
        .expect("purge");
    assert_eq!(second.tenant, Some(tenant("t-c")));
    assert_eq!((left(&fx, "t-a").await, left(&fx, "t-c").await), (0, 0));
}

/// `purge_expired` applies each tenant's own window: a tenant with a longer window keeps
/// rows another tenant of the same age loses.
pub async fn purge_honours_tenant_windows(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "order.*").await;
    finished(&fx, &c, &[("long", 2), ("short", 2), ("usual", 1)]).await;
    let policy = RetentionPolicy::new(secs(3 * 3600))
        .tenant(tenant("long"), secs(10 * 3600))
        .tenant(tenant("short"), secs(3600));

    fx.clock().advance(secs(2 * 3600));
    let mut served = Vec::new();
    loop {
        let r = fx
            .store()
            .purge_expired(&policy.cutoffs(now(&fx)), 100)
            .await
            .expect("purge_expired");
        match r.tenant {
            Some(t) => served.push((t.as_str().to_owned(), r.deliveries)),
            None => break,
        }
        assert!(served.len() < 10, "the pass must end");
    }
    assert_eq!(
        served,
        vec![("short".to_owned(), 2)],
        "only `short` expired"
    );
    assert_eq!((left(&fx, "long").await, left(&fx, "usual").await), (2, 1));

    fx.clock().advance(secs(2 * 3600));
    let r = fx
        .store()
        .purge_expired(&policy.cutoffs(now(&fx)), 100)
        .await
        .expect("purge_expired");
    assert_eq!(
        (r.tenant, r.deliveries),
        (Some(tenant("usual")), 1),
        "the default window applies to tenants without an override"
    );
    assert_eq!(left(&fx, "long").await, 2);

    fx.clock().advance(secs(7 * 3600));
    let r = fx
        .store()
        .purge_expired(&policy.cutoffs(now(&fx)), 100)
        .await
        .expect("purge_expired");
    assert_eq!((r.tenant, r.deliveries), (Some(tenant("long")), 2));
}

/// With per-tenant windows the rotation still visits every tenant with expired rows in
/// turn, at most `limit` rows each, and skips tenants whose rows are not yet expired.
pub async fn purge_rotation_visits_every_tenant_with_windows(fx: Fixture) {
    let c = add_consumer(&fx, "worker", "*").await;
    finished(&fx, &c, &[("t-a", 5), ("t-b", 1), ("t-c", 2), ("t-d", 1)]).await;
    fx.clock().advance(secs(120));
    let policy = RetentionPolicy::new(secs(60))
        .tenant(tenant("t-c"), secs(3600))
        .tenant(tenant("t-d"), secs(30));
    let cutoffs = policy.cutoffs(now(&fx));
    let mut visits = Vec::new();
    for _ in 0..5 {
        let r = fx
            .store()
            .purge_expired(&cutoffs, 2)
            .await
            .expect("purge_expired");
        visits.push((
            r.tenant.expect("a tenant with work").as_str().to_owned(),
            r.deliveries,
        ));
    }
    let want = [("t-a", 2), ("t-b", 1), ("t-d", 1), ("t-a", 2), ("t-a", 1)];
    assert_eq!(visits, want.map(|(t, n)| (t.to_owned(), n)).to_vec());
    let done = fx
        .store()
        .purge_expired(&cutoffs, 2)
        .await
        .expect("purge_expired");
    assert_eq!((done.tenant, done.deliveries), (None, 0));
    assert_eq!(left(&fx, "t-c").await, 2, "t-c's window has not passed");
}

/// `tenant_stats` counts only the tenant's deliveries, and only one endpoint's when asked;
/// another tenant's endpoint counts nothing.
pub async fn stats_are_scoped_by_tenant_and_endpoint(fx: Fixture) {
    add_consumer(&fx, "worker", "order.*").await;
    let e1 = add_endpoint(&fx, "acme", "*").await;
    let e2 = add_endpoint(&fx, "acme", "order.*").await;
    let e3 = add_endpoint(&fx, "beta", "*").await;
    let t0 = now(&fx);
    enqueue(&fx, msg("order.created").tenant("acme")).await;
    enqueue(&fx, msg("user.created").tenant("acme")).await;
    enqueue(&fx, msg("user.created").tenant("beta").delay(secs(3600))).await;
    fx.clock().advance(secs(5));

    let acme = fx
        .store()
        .tenant_stats(&tenant("acme"), None)
        .await
        .expect("tenant_stats");
    // order.created: worker, e1, e2; user.created: e1.
    assert_eq!((acme.pending, acme.total()), (4, 4));
    assert_eq!(
        (acme.oldest_due_at, acme.oldest_due_age),
        (Some(t0), Some(secs(5)))
    );
    let only_e1 = fx
        .store()
        .tenant_stats(&tenant("acme"), Some(e1.id))
        .await
        .expect("tenant_stats");
    assert_eq!(only_e1.total(), 2);
    let only_e2 = fx
        .store()
        .tenant_stats(&tenant("acme"), Some(e2.id))
        .await
        .expect("tenant_stats");
    assert_eq!(only_e2.total(), 1);
    let beta = fx
        .store()
        .tenant_stats(&tenant("beta"), None)
        .await
        .expect("tenant_stats");
    assert_eq!((beta.pending, beta.oldest_due_at), (1, None), "not due yet");
    let cross = fx
        .store()
        .tenant_stats(&tenant("beta"), Some(e1.id))
        .await
        .expect("tenant_stats");
    assert_eq!(cross.total(), 0, "acme's endpoint counts nothing for beta");
    let beta_e3 = fx
        .store()
        .tenant_stats(&tenant("beta"), Some(e3.id))
        .await
        .expect("tenant_stats");
    assert_eq!(beta_e3.total(), 1);
    let nobody = fx
        .store()
        .tenant_stats(&tenant("nobody"), None)
        .await
        .expect("tenant_stats");
    assert_eq!(nobody.total(), 0);
    assert_eq!(fx.store().stats().await.expect("stats").total(), 5);

    let got = claim_one(
        &fx,
        &for_consumer(&ConsumerName::new("worker").expect("name")),
    )
    .await;
    complete_with(&fx, &got, Verdict::Succeeded, None).await;
    let acme = fx
        .store()
        .tenant_stats(&tenant("acme"), None)
        .await
        .expect("tenant_stats");
    assert_eq!((acme.pending, acme.succeeded), (3, 1));
}

/// `tenants` lists every tenant with deliveries or messages, by name, with its counts.
pub async fn tenants_are_listed_with_counts(fx: Fixture) {
    assert!(fx.store().tenants().await.expect("tenants").is_empty());
    let c = add_consumer(&fx, "worker", "order.*").await;
    enqueue(&fx, msg("order.created").tenant("beta")).await;
    enqueue(&fx, msg("order.created").tenant("alpha")).await;
    enqueue(&fx, msg("order.created").tenant("alpha")).await;
    enqueue(&fx, msg("nothing.matches").tenant("gamma")).await;
    let got = claim(&fx, &for_consumer(&c)).await;
    let beta_one = got
        .iter()
        .find(|g| g.delivery.tenant == tenant("beta"))
        .expect("beta's delivery");
    complete_with(&fx, beta_one, Verdict::Succeeded, None).await;

    let list = fx.store().tenants().await.expect("tenants");
    let names: Vec<&str> = list.iter().map(|t| t.tenant.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma"]);
    let by = |n: &str| {
        list.iter()
            .find(|t| t.tenant == TenantId::new(n).expect("tenant"))
            .expect("listed")
    };
    assert_eq!(
        (
            by("alpha").stats.processing,
            by("alpha").stats.total(),
            by("alpha").messages
        ),
        (2, 2, 2)
    );
    assert_eq!(
        (
            by("beta").stats.succeeded,
            by("beta").stats.total(),
            by("beta").messages
        ),
        (1, 1, 1)
    );
    assert_eq!((by("gamma").stats.total(), by("gamma").messages), (0, 1));
}
