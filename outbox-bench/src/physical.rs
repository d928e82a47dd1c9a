//! The physical cost of a drain, counted by the server around it: WAL records and bytes,
//! heap tuples written, index tuples written, write transactions, and the client's calls.
//!
//! Two sources, read on a fresh connection after the drain's own connections were closed
//! (a backend flushes its pending statistics when it exits; the reader then waits
//! [`SETTLE`]), because `pg_stat_*` views are updated asynchronously:
//!
//! - `pg_stat_user_tables` for the scope's tables: inserts, updates, deletes, HOT updates.
//!   Per table, so other sessions' work on other tables does not leak in.
//! - The WAL between the two insert positions, read with `pg_walinspect` (PostgreSQL 15+,
//!   superuser; installed on first use in a schema of its own) and kept to the records whose
//!   first block is one of the scope's relations (tables, their indexes, their TOAST), plus
//!   the commit records of the transactions that wrote them. This is exact for the scope and
//!   blind to the rest of the cluster. Index tuples written are the B-tree leaf insertions
//!   among them (`INSERT_LEAF`, `INSERT_POST`, and leaf splits, which carry the new tuple).
//!   `pg_stat_wal` (cluster-wide: every database, every background process) is kept beside
//!   it for reference; it is the only WAL figure when `pg_walinspect` cannot be used.
//!
//! The formula "(inserts + non-HOT updates) × indexes of the table" is the fallback for the
//! index tuples and is shown beside the WAL count: it over-counts partial indexes (a row
//! outside the predicate gets no entry) and counts nothing for deletes (which write no index
//! entry; vacuum removes them later).

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Connection as _, Row as _};

use crate::common::BenchResult;

/// How long the reader waits after the drain's connections closed before reading.
pub const SETTLE: Duration = Duration::from_millis(1200);

/// The schema in which the bench installs `pg_walinspect` when it is not installed yet.
const WALINSPECT_SCHEMA: &str = "outbox_bench_walinspect";

/// Which relations a measurement covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The schema.
    pub schema: String,
    /// The tables of the schema, or every table of it when empty.
    pub tables: Vec<String>,
}

impl Scope {
    /// Every table of `schema`.
    pub fn schema(schema: &str) -> Self {
        Scope {
            schema: schema.to_owned(),
            tables: Vec::new(),
        }
    }

    /// The named tables of `schema`.
    pub fn tables(schema: &str, tables: &[String]) -> Self {
        Scope {
            schema: schema.to_owned(),
            tables: tables.to_vec(),
        }
    }

    fn names(&self) -> Option<Vec<String>> {
        (!self.tables.is_empty()).then(|| self.tables.clone())
    }
}

/// One table's counters (`pg_stat_user_tables`), and how many indexes it has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// The table.
    pub name: String,
    /// `n_tup_ins`.
    pub ins: i64,
    /// `n_tup_upd`.
    pub upd: i64,
    /// `n_tup_del`.
    pub del: i64,
    /// `n_tup_hot_upd`.
    pub hot: i64,
    /// Indexes on the table.
    pub indexes: i64,
}

impl TableCounts {
    /// Heap tuples written: inserted, updated (a new version each) and deleted.
    pub fn heap_writes(&self) -> i64 {
        self.ins + self.upd + self.del
    }

    /// (inserts + non-HOT updates) × indexes: every index gets an entry for a new row and
    /// for a new version that is not HOT; deletes write none.
    pub fn index_writes_formula(&self) -> i64 {
        (self.ins + self.upd - self.hot) * self.indexes
    }
}

/// The server's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// `pg_stat_wal.wal_records` (cluster-wide).
    pub wal_records: i64,
    /// `pg_stat_wal.wal_bytes` (cluster-wide).
    pub wal_bytes: i64,
    /// `pg_current_wal_insert_lsn()` (the WAL read starts here).
    pub lsn: String,
    /// The scope's tables.
    pub tables: Vec<TableCounts>,
}

/// What the WAL between two snapshots holds for a scope.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalCounts {
    /// Records (the scope's relations' and their transactions' commits).
    pub records: i64,
    /// Their bytes, full-page images included.
    pub bytes: i64,
    /// Of which full-page images (they follow checkpoints, not the workload).
    pub fpi_bytes: i64,
    /// B-tree leaf tuples written.
    pub index_tuples: i64,
    /// Commit records: the write transactions.
    pub commits: i64,
    /// Heap tuples written to the scope's tables (insert, update and delete records).
    pub heap_tuples: i64,
    /// Heap `UPDATE` records of the hot table (the table with the most updates).
    pub updates: i64,
    /// Heap `HOT_UPDATE` records of that table.
    pub hot_updates: i64,
}

/// The cost of one drain: the counter deltas and the client's calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Cost {
    /// Messages delivered (the divisor).
    pub delivered: u64,
    /// The client's calls to the server during the drain (round trips).
    pub calls: u64,
    /// `pg_stat_wal` deltas (cluster-wide): records, bytes.
    pub cluster_wal: (i64, i64),
    /// Per-table deltas.
    pub tables: Vec<TableCounts>,
    /// The scope's WAL (`pg_walinspect`), or why it could not be read.
    pub wal: Result<WalCounts, String>,
    /// Seconds the table statistics took to settle after the drain (they are flushed
    /// asynchronously), or `None` when they did not within [`SETTLE_LIMIT`].
    pub settled_after: Option<f64>,
}

/// How long [`cost_since`] waits for the table statistics to settle.
pub const SETTLE_LIMIT: Duration = Duration::from_secs(15);

/// The per-table deltas from `before` to `after`; a table that appeared in between counts
/// from zero, and the index count is the one after.
pub fn delta(before: &[TableCounts], after: &[TableCounts]) -> Vec<TableCounts> {
    after
        .iter()
        .map(|a| {
            let b = before.iter().find(|b| b.name == a.name);
            let sub = |f: fn(&TableCounts) -> i64| f(a) - b.map_or(0, f);
            TableCounts {
                name: a.name.clone(),
                ins: sub(|t| t.ins),
                upd: sub(|t| t.upd),
                del: sub(|t| t.del),
                hot: sub(|t| t.hot),
                indexes: a.indexes,
            }
        })
        .collect()
}

/// Per-delivery figures of a [`Cost`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerDelivery {
    /// WAL bytes without full-page images (the scope's WAL, else the cluster's bytes).
    pub wal_bytes: f64,
    /// WAL records (likewise).
    pub wal_records: f64,
    /// Heap tuples written (the WAL's heap records, else the table statistics).
    pub heap: f64,
    /// Index tuples written (the WAL count, else the formula).
    pub index: f64,
    /// The formula's index tuples.
    pub index_formula: f64,
    /// Write transactions (0 without the WAL).
    pub commits: f64,
    /// Client calls.
    pub calls: f64,
    /// Whether the WAL figures are the scope's (`pg_walinspect`) rather than the cluster's.
    pub scoped: bool,
}

impl Cost {
    /// Sum of a per-table figure.
    fn sum(&self, f: impl Fn(&TableCounts) -> i64) -> i64 {
        self.tables.iter().map(f).sum()
    }

    /// Every figure divided by the messages delivered.
    pub fn per_delivery(&self) -> PerDelivery {
        let d = self.delivered.max(1) as f64;
        let per = |x: i64| x as f64 / d;
        let formula = self.sum(TableCounts::index_writes_formula);
        let heap = match &self.wal {
            Ok(w) => per(w.heap_tuples),
            Err(_) => per(self.sum(TableCounts::heap_writes)),
        };
        let (wal_bytes, wal_records, index, commits, scoped) = match &self.wal {
            Ok(w) => (
                per(w.bytes - w.fpi_bytes),
                per(w.records),
                per(w.index_tuples),
                per(w.commits),
                true,
            ),
            Err(_) => (
                per(self.cluster_wal.1),
                per(self.cluster_wal.0),
                per(formula),
                0.0,
                false,
            ),
        };
        PerDelivery {
            wal_bytes,
            wal_records,
            heap,
            index,
            index_formula: per(formula),
            commits,
            calls: self.calls as f64 / d,
            scoped,
        }
    }

    /// The HOT share of the hot table's updates from the WAL (exact), when it was read.
    pub fn wal_hot_ratio(&self) -> Option<f64> {
        self.wal
            .as_ref()
            .ok()
            .filter(|w| w.updates + w.hot_updates > 0)
            .map(|w| w.hot_updates as f64 / (w.updates + w.hot_updates) as f64)
    }

    /// The HOT share of the updates of the table updated most (the hot table), with its
    /// name, from `pg_stat_user_tables`; `None` when nothing was updated.
    pub fn hot_ratio(&self) -> Option<(String, f64)> {
        self.tables
            .iter()
            .filter(|t| t.upd > 0)
            .max_by_key(|t| t.upd)
            .map(|t| (t.name.clone(), t.hot as f64 / t.upd as f64))
    }

    /// The raw counts and the per-delivery figures, for a row's notes.
    pub fn describe(&self) -> String {
        let p = self.per_delivery();
        let tables: Vec<String> = self
            .tables
            .iter()
            .filter(|t| t.heap_writes() > 0)
            .map(|t| {
                format!(
                    "{} ins {} upd {} (HOT {}) del {}, {} idx",
                    t.name, t.ins, t.upd, t.hot, t.del, t.indexes
                )
            })
            .collect();
        let wal = match &self.wal {
            Ok(w) => {
                format!(
                "scope WAL {} rec, {} B (FPI {} B), {} heap tuples, {} index tuples, {} commits, \
                 hot table {} UPDATE + {} HOT_UPDATE",
                w.records, w.bytes, w.fpi_bytes, w.heap_tuples, w.index_tuples, w.commits, w.updates,
                w.hot_updates
            )
            }
            Err(e) => format!("scope WAL unavailable ({e})"),
        };
        let settled = self.settled_after.map_or_else(
            || "table statistics did not settle".to_owned(),
            |s| format!("table statistics settled after {s:.1} s"),
        );
        format!(
            "{} delivered, {} calls; {wal}; cluster pg_stat_wal {} rec, {} B; {}; {settled}; per delivery: \
             WAL {:.0} B{} and {:.2} rec, heap {:.2}, index {:.2} (formula {:.2}), {:.3} commits, \
             {:.3} calls",
            self.delivered,
            self.calls,
            self.cluster_wal.0,
            self.cluster_wal.1,
            tables.join("; "),
            p.wal_bytes,
            if p.scoped {
                " w/o FPI"
            } else {
                " (cluster-wide)"
            },
            p.wal_records,
            p.heap,
            p.index,
            p.index_formula,
            p.commits,
            p.calls,
        )
    }
}

/// Ask every open connection of `pool` to flush its pending statistics now
/// (`pg_stat_force_next_flush()`, PostgreSQL 15+: the backend flushes when it goes idle after
/// the call); call it before closing a pool whose writes are counted. Without it a sqlx
/// connection's statistics were seen to arrive only after PostgreSQL's 10 s idle interval,
/// even after `close()`. Best effort: the readers wait for the statistics to settle anyway.
pub async fn force_flush(pool: &sqlx::PgPool) {
    let mut held = Vec::new();
    for _ in 0..pool.size() {
        match tokio::time::timeout(Duration::from_secs(2), pool.acquire()).await {
            Ok(Ok(mut c)) => {
                let _ = sqlx::query("SELECT pg_stat_force_next_flush()")
                    .execute(&mut *c)
                    .await;
                held.push(c);
            }
            _ => break,
        }
    }
}

async fn connect(url: &str) -> BenchResult<PgConnection> {
    PgConnection::connect(url)
        .await
        .map_err(|e| format!("stats connection: {e}"))
}

/// The counters before a drain: read until two readings of the scope's tables agree (the
/// setup's statistics are flushed asynchronously), for at most [`SETTLE_LIMIT`].
pub async fn snapshot_before(url: &str, scope: &Scope) -> BenchResult<Snapshot> {
    let sw = outboxkit_core::Stopwatch::start();
    let mut last = snapshot(url, scope).await?;
    loop {
        let now = snapshot(url, scope).await?;
        if now.tables == last.tables || sw.elapsed() >= SETTLE_LIMIT {
            return Ok(now);
        }
        last = now;
    }
}

/// The counters now, read on a fresh connection (after [`SETTLE`]).
pub async fn snapshot(url: &str, scope: &Scope) -> BenchResult<Snapshot> {
    tokio::time::sleep(SETTLE).await;
    let mut conn = connect(url).await?;
    let (wal_records, wal_bytes, lsn): (i64, i64, String) = sqlx::query_as(
        "SELECT wal_records::int8, wal_bytes::int8, pg_current_wal_insert_lsn()::text \
           FROM pg_stat_wal",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|e| format!("pg_stat_wal: {e}"))?;
    let rows = sqlx::query(
        "SELECT t.relname::text, t.n_tup_ins, t.n_tup_upd, t.n_tup_del, t.n_tup_hot_upd, \
                (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid) \
           FROM pg_stat_user_tables t \
          WHERE t.schemaname = $1 AND ($2::text[] IS NULL OR t.relname = ANY($2)) \
          ORDER BY 1",
    )
    .bind(&scope.schema)
    .bind(scope.names())
    .fetch_all(&mut conn)
    .await
    .map_err(|e| format!("pg_stat_user_tables: {e}"))?;
    let tables = rows
        .iter()
        .map(|r| TableCounts {
            name: r.get(0),
            ins: r.get(1),
            upd: r.get(2),
            del: r.get(3),
            hot: r.get(4),
            indexes: r.get(5),
        })
        .collect();
    let _ = conn.close().await;
    Ok(Snapshot {
        wal_records,
        wal_bytes,
        lsn,
        tables,
    })
}

/// The cost from `before` to now (call it after closing the drain's connections). The WAL
/// is read first (it is final); the table statistics are read until two readings agree and
/// show the heap writes the WAL shows (without the WAL: any), for at most [`SETTLE_LIMIT`].
pub async fn cost_since(
    url: &str,
    scope: &Scope,
    before: &Snapshot,
    delivered: u64,
    calls: u64,
) -> BenchResult<Cost> {
    let wal = scope_wal(url, scope, &before.lsn).await;
    let expect = wal.as_ref().ok().map(|w| w.heap_tuples);
    let sw = outboxkit_core::Stopwatch::start();
    let mut last: Option<Snapshot> = None;
    let mut settled_after = None;
    loop {
        let after = snapshot(url, scope).await?;
        let writes: i64 = delta(&before.tables, &after.tables)
            .iter()
            .map(TableCounts::heap_writes)
            .sum();
        let stable = last.as_ref().is_some_and(|l| l.tables == after.tables);
        let done = stable && expect.map_or(writes > 0, |e| e == writes);
        last = Some(after);
        if done {
            settled_after = Some(sw.elapsed().as_secs_f64());
            break;
        }
        if sw.elapsed() >= SETTLE_LIMIT {
            break;
        }
    }
    let after = last.unwrap_or_default();
    Ok(Cost {
        delivered,
        calls,
        cluster_wal: (
            after.wal_records - before.wal_records,
            after.wal_bytes - before.wal_bytes,
        ),
        tables: delta(&before.tables, &after.tables),
        wal,
        settled_after,
    })
}

/// The schema holding `pg_walinspect`, installing it when it is missing.
async fn walinspect(conn: &mut PgConnection) -> BenchResult<String> {
    let installed: Option<String> = sqlx::query_scalar(
        "SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
          WHERE e.extname = 'pg_walinspect'",
    )
    .fetch_optional(&mut *conn)
    .await
    .map_err(|e| format!("pg_extension: {e}"))?;
    if let Some(s) = installed {
        return Ok(s);
    }
    let ddl = format!(
        "CREATE SCHEMA IF NOT EXISTS {WALINSPECT_SCHEMA}; \
         CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA {WALINSPECT_SCHEMA}"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl.to_string()))
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("create extension pg_walinspect: {e}"))?;
    Ok(WALINSPECT_SCHEMA.to_owned())
}

/// The scope's WAL from `start` to the flushed end.
async fn scope_wal(url: &str, scope: &Scope, start: &str) -> Result<WalCounts, String> {
    let mut conn = connect(url).await?;
    let ns = walinspect(&mut conn).await?;
    // The scope's relations (tables, their TOAST, the indexes of both) by file node, and the
    // database's oid: a block reference reads `rel <tablespace>/<database>/<filenode>`.
    let sql = format!(
        "WITH t AS ( \
           SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
            WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm') \
              AND ($2::text[] IS NULL OR c.relname = ANY($2))), \
         tt AS (SELECT oid FROM t UNION \
                SELECT c.reltoastrelid FROM pg_class c JOIN t ON c.oid = t.oid \
                 WHERE c.reltoastrelid <> 0), \
         rels AS (SELECT oid, 'h' AS k FROM tt UNION \
                  SELECT i.indexrelid, 'i' FROM pg_index i JOIN tt ON i.indrelid = tt.oid), \
         nodes AS (SELECT pg_relation_filenode(oid)::text AS node, k FROM rels \
                    WHERE pg_relation_filenode(oid) IS NOT NULL), \
         w AS (SELECT xid::text AS xid, resource_manager, record_type, record_length, \
                      fpi_length, description, \
                      substring(block_ref FROM 'rel [0-9]+/' || \
                        (SELECT oid FROM pg_database WHERE datname = current_database())::text \
                        || '/([0-9]+)') AS node \
                 FROM {ns}.pg_get_wal_records_info($3::pg_lsn, pg_current_wal_flush_lsn())), \
         mine AS (SELECT w.*, nodes.k FROM w JOIN nodes ON nodes.node = w.node), \
         xids AS (SELECT DISTINCT xid FROM mine WHERE xid <> '0'), \
         commits AS (SELECT w.* FROM w \
                      WHERE w.resource_manager = 'Transaction' \
                        AND w.record_type LIKE 'COMMIT%' \
                        AND w.xid IN (SELECT xid FROM xids)), \
         hot AS (SELECT node, count(*) FILTER (WHERE record_type LIKE 'UPDATE%') AS u, \
                        count(*) FILTER (WHERE record_type LIKE 'HOT_UPDATE%') AS h \
                   FROM mine WHERE k = 'h' AND resource_manager = 'Heap' GROUP BY node) \
         SELECT (SELECT count(*) FROM mine) + (SELECT count(*) FROM commits), \
                (coalesce((SELECT sum(record_length) FROM mine), 0) \
                 + coalesce((SELECT sum(record_length) FROM commits), 0))::int8, \
                coalesce((SELECT sum(fpi_length) FROM mine), 0)::int8, \
                (SELECT count(*) FROM mine WHERE k = 'i' AND resource_manager = 'Btree' \
                    AND (record_type IN ('INSERT_LEAF', 'INSERT_POST') \
                         OR (record_type IN ('SPLIT_L', 'SPLIT_R') \
                             AND description ~ '^level:? 0,'))), \
                (SELECT count(*) FROM commits), \
                coalesce((SELECT u FROM hot ORDER BY u + h DESC LIMIT 1), 0), \
                coalesce((SELECT h FROM hot ORDER BY u + h DESC LIMIT 1), 0), \
                (SELECT count(*) FROM mine WHERE k = 'h' AND resource_manager = 'Heap' \
                    AND (record_type LIKE 'INSERT%' OR record_type LIKE 'UPDATE%' \
                         OR record_type LIKE 'HOT_UPDATE%' OR record_type LIKE 'DELETE%')) \
                + coalesce((SELECT sum(coalesce(substring(description FROM '([0-9]+) tuples')::int8, 1)) \
                    FROM mine WHERE k = 'h' AND resource_manager = 'Heap2' \
                     AND record_type LIKE 'MULTI_INSERT%'), 0)::int8"
    );
    let r = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(&scope.schema)
        .bind(scope.names())
        .bind(start)
        .fetch_one(&mut conn)
        .await
        .map_err(|e| format!("pg_get_wal_records_info: {e}"))?;
    let _ = conn.close().await;
    Ok(WalCounts {
        records: r.get(0),
        bytes: r.get(1),
        fpi_bytes: r.get(2),
        index_tuples: r.get(3),
        commits: r.get(4),
        updates: r.get(5),
        hot_updates: r.get(6),
        heap_tuples: r.get(7),
    })
}

#[cfg(test)]
#[path = "physical_tests.rs"]
mod tests;
