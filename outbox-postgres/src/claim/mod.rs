//! The hot path of `DeliveryStore`: claim in one statement, then complete, release, extend
//! or mark sending, in batches where the engine batches, fenced by claim tokens.
//!
//! # Cancel safety
//!
//! The claim is one autocommit statement, every other method one statement on a pooled
//! connection (the claim's and the settle's own, `hot.rs`, or the application's pool).
//! Dropping a future before it returns may leave its change applied or not: a claim dropped
//! before its commit claims nothing; one committed but never seen leaves its deliveries
//! leased until the lease ends, when they are claimable again (the attempt it spent counts);
//! a completion or release that was applied changes the delivery as asked, one that was not
//! leaves it leased. Nothing is half-applied.

use std::collections::HashSet;
use std::time::Duration;

use outboxkit_core::{
    ClaimRequest, Claimed, Completion, Error, Lease, ReleaseReport, Result, Stopwatch,
};
use uuid::Uuid;

use crate::error::DbResult;
use crate::rows::{self, int4, ms};
use crate::sql::Params;
use crate::store::PostgresStore;

mod row;
mod settle;

impl PostgresStore {
    /// `DeliveryStore::claim`: `claim` of `sql/claim.sql`, with fresh tokens from the
    /// injected entropy.
    pub(crate) async fn claim_now(&self, request: &ClaimRequest) -> Result<Vec<Claimed>> {
        request.validate()?;
        let now = self.inner.clock.now();
        let until = now.saturating_add(request.lease());
        let batch = request.batch_size() as usize;
        let (consumers, budgets): (Vec<&str>, Vec<i32>) = request
            .consumers()
            .map(|(c, b)| (c.as_str(), int4(b)))
            .unzip();
        let dormant: Vec<&str> = request.dormant().iter().map(|t| t.as_str()).collect();
        let excluded_endpoints: Vec<String> = request
            .excluded_endpoints()
            .iter()
            .map(ToString::to_string)
            .collect();
        let (room_endpoints, rooms): (Vec<String>, Vec<i64>) = request
            .endpoint_rooms()
            .iter()
            .map(|(e, n)| (e.to_string(), i64::from(*n)))
            .unzip();
        self.ensure_history(now).await?;
        let sql = &self.inner.sql.claim;
        let params = Params::new()
            .set("now", ms(now))
            .set("batch", batch as i64)
            .set("consumers", consumers)
            .set("budgets", budgets)
            .set("webhook_budget", request.webhook_budget().map(int4))
            .set("email_budget", request.email_budget().map(int4))
            .set("dormant", dormant)
            .set("tokens", self.tokens(batch))
            .set("until", ms(until))
            .set("excluded", excluded_endpoints)
            .set("room_endpoints", room_endpoints)
            .set("rooms", rooms)
            .set(
                "endpoint_limit",
                request.default_endpoint_limit().map(i64::from),
            );
        // One autocommit statement on a claim connection (`crate::hot`: its session plans it
        // generically, without JIT, and commits without waiting for the WAL flush).
        let mut conn = self.inner.hot.claim.acquire().await.db()?;
        let took = Stopwatch::start();
        let found = (sql.claim.bind(params)?).fetch_all(&mut *conn).await.db()?;
        crate::hot::replan_if_slow(&mut conn, &took).await;
        row::claimed_all(&found)
    }

    /// `n` fresh claim tokens from the injected entropy, one fill for the whole batch.
    fn tokens(&self, n: usize) -> Vec<Uuid> {
        let mut bytes = vec![0u8; 16 * n];
        self.inner.entropy.fill(&mut bytes);
        bytes
            .chunks_exact(16)
            .map(|c| {
                let mut b = [0u8; 16];
                b.copy_from_slice(c);
                uuid::Builder::from_random_bytes(b).into_uuid()
            })
            .collect()
    }
}
