//! The hot path's own connections: the claim and the settle writes run on two small pools the
//! store opens beside the application's, built from the same connect options (host, TLS,
//! credentials, `application_name`) with the planner settings of their statements fixed for
//! the session (startup parameters), so no call pays a round trip to set them:
//!
//! - **claims**: JIT off (the claim's cost estimate easily crosses `jit_above_cost`, and JIT
//!   compilation was measured at 155 ms for a 5 ms execution), the generic plan (planned once
//!   per connection, 0.1–0.2 ms, instead of 1–3 ms of planning on every call; on the narrow
//!   queue every access of the claim is an index range or probe, so its generic plan does not
//!   depend on the table size it was first planned at — docs/postgres-v3.md), sequential scans
//!   off as a guard, and commits that do not wait for the WAL flush (a claim lost to a server
//!   crash only makes its deliveries claimable again; a completion's synchronous commit flushes
//!   the claim before it). The claim is then one autocommit statement: one round trip instead
//!   of four (the pool's ping, `BEGIN; SET LOCAL …`, the statement and `COMMIT`).
//! - **settles** (`complete_many`, `release`): the same planner settings, synchronous commits
//!   (a completion is durable when it returns): the completion's plan is built once per
//!   connection instead of at every bind.
//!
//! **Plans made on empty tables.** A connection plans each statement once, against the tables'
//! statistics and size at that moment. Planned while the queue, its messages and groups were
//! empty (a freshly migrated schema, a drained and vacuumed queue), every access by id costs
//! as much as a walk of the whole index, and the generic plan may walk: once the tables fill,
//! such a claim walks the queue's and the messages' primary keys (3.4–4.1 s for a claim of 64
//! at 100,000 rows in the lab, against 2–8 ms planned afresh; BENCHMARKS.md). So a statement
//! on a hot connection that took longer than [`REPLAN_AFTER`] is followed by `DISCARD PLANS`
//! on that connection ([`replan_if_slow`]): its next statements are planned against the tables
//! as they are then. A healthy claim or completion takes a few milliseconds; a slow one for
//! another reason (a slow disk flush) only costs one more plan.
//!
//! Neither pool pings a connection before handing it out (sqlx's default costs one more round
//! trip per call); a connection that died while idle fails its next call as `Unavailable`.
//!
//! Each pool opens at most [`HOT_CONNECTIONS`] connections (fewer when the application's pool
//! is smaller), lazily, and closes idle ones after [`HOT_IDLE`]. A dispatcher holds up to as
//! many claims at once as the claim pool has connections (`DeliveryStore::parallel_claims`:
//! two server processes run two claims side by side, where one claim left a core idle) and one
//! settle, so a store driven by one dispatcher opens up to three connections here.
//! Settings the application's pool applies after connecting (`after_connect`) are not
//! repeated: the statements name their schema, so `search_path` does not matter, but a role
//! set that way is not (ARCHITECTURE.md, "The hot path's connections").

use std::time::Duration;

use outboxkit_core::Stopwatch;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use tokio::runtime::Handle;

use crate::config::PostgresConfig;

/// The most connections of each hot pool.
pub(crate) const HOT_CONNECTIONS: u32 = 2;

/// How long a hot connection may stay idle before it is closed.
pub(crate) const HOT_IDLE: Duration = Duration::from_secs(60);

/// A statement on a hot connection slower than this is followed by `DISCARD PLANS` on it
/// (module docs, "Plans made on empty tables").
pub(crate) const REPLAN_AFTER: Duration = Duration::from_millis(20);

/// Drop `conn`'s cached plans when the statement timed by `took` ran longer than
/// [`REPLAN_AFTER`]. A failure changes nothing but the log: the connection keeps its plans,
/// and a dead connection fails its next statement as before.
pub(crate) async fn replan_if_slow(conn: &mut PgConnection, took: &Stopwatch) {
    if took.elapsed() < REPLAN_AFTER {
        return;
    }
    if let Err(e) = sqlx::raw_sql("DISCARD PLANS").execute(conn).await {
        tracing::debug!(error = %e, "outbox could not drop a hot connection's plans");
    }
}

/// The planner settings both hot pools start their sessions with.
const PLANNER: [(&str, &str); 3] = [
    ("jit", "off"),
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
];

/// The claim's and the settle's pools (see the module docs).
#[derive(Debug)]
pub(crate) struct HotPools {
    pub claim: PgPool,
    pub settle: PgPool,
    /// The claim pool's most connections: the claims a dispatcher may have in flight.
    pub claims_at_once: usize,
}

impl HotPools {
    /// Pools beside `pool`, from its connect options; nothing connects until first used.
    pub(crate) fn new(runtime: &Handle, pool: &PgPool, config: &PostgresConfig) -> Self {
        // The pools' maintenance tasks (idle timeout) run on the store's runtime.
        let _entered = runtime.enter();
        let base = (*pool.connect_options()).clone().options(PLANNER);
        let size = pool
            .options()
            .get_max_connections()
            .clamp(1, HOT_CONNECTIONS);
        let options = || {
            PgPoolOptions::new()
                .max_connections(size)
                .min_connections(0)
                .idle_timeout(HOT_IDLE)
                .acquire_timeout(config.connect_timeout)
                // No ping before each use (a round trip on the claim's critical path): a
                // connection that died while idle fails its next statement as `Unavailable`,
                // which the engine retries, and sqlx then drops it.
                .test_before_acquire(false)
        };
        HotPools {
            claim: options()
                .connect_lazy_with(base.clone().options([("synchronous_commit", "off")])),
            settle: options().connect_lazy_with(base),
            claims_at_once: usize::try_from(size).unwrap_or(1),
        }
    }
}
