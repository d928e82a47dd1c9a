//! Unit tests of `physical.rs`: deltas, the index formula, per-delivery figures.

use super::*;

fn t(name: &str, ins: i64, upd: i64, del: i64, hot: i64, indexes: i64) -> TableCounts {
    TableCounts {
        name: name.to_owned(),
        ins,
        upd,
        del,
        hot,
        indexes,
    }
}

#[test]
fn deltas_subtract_per_table_and_new_tables_count_from_zero() {
    let before = [t("deliveries", 100, 50, 10, 5, 6), t("gone", 9, 9, 9, 9, 1)];
    let after = [
        t("deliveries", 150, 150, 60, 85, 2),
        t("done", 50, 0, 0, 0, 3),
    ];
    assert_eq!(
        delta(&before, &after),
        vec![
            t("deliveries", 50, 100, 50, 80, 2),
            t("done", 50, 0, 0, 0, 3)
        ]
    );
}

#[test]
fn tuples_written_and_the_index_formula() {
    let d = t("deliveries", 10, 100, 10, 90, 2);
    assert_eq!(d.heap_writes(), 120);
    // 10 new rows and 10 non-HOT versions, two indexes each; deletes write none.
    assert_eq!(d.index_writes_formula(), 40);
}

fn cost(wal: Result<WalCounts, String>) -> Cost {
    Cost {
        delivered: 100,
        calls: 4,
        cluster_wal: (2000, 300_000),
        tables: vec![t("q", 0, 100, 100, 0, 2), t("a", 100, 0, 0, 0, 2)],
        wal,
        settled_after: Some(1.2),
    }
}

#[test]
fn per_delivery_figures_prefer_the_scoped_wal() {
    let w = WalCounts {
        records: 900,
        bytes: 150_000,
        fpi_bytes: 38_000,
        index_tuples: 400,
        commits: 2,
        heap_tuples: 300,
        updates: 90,
        hot_updates: 10,
    };
    let c = cost(Ok(w));
    let p = c.per_delivery();
    assert!(p.scoped);
    assert_eq!(p.wal_bytes, 1120.0);
    assert_eq!(p.wal_records, 9.0);
    assert_eq!(p.heap, 3.0);
    assert_eq!(p.index, 4.0);
    assert_eq!(p.index_formula, 4.0);
    assert_eq!(p.commits, 0.02);
    assert_eq!(p.calls, 0.04);
    assert_eq!(c.wal_hot_ratio(), Some(0.1));
    assert_eq!(c.hot_ratio(), Some(("q".to_owned(), 0.0)));
    let fallback = cost(Err("no pg_walinspect".into())).per_delivery();
    assert!(!fallback.scoped);
    assert_eq!(fallback.wal_bytes, 3000.0);
    assert_eq!(fallback.wal_records, 20.0);
    assert_eq!(fallback.index, 4.0);
    assert_eq!(fallback.commits, 0.0);
    assert!(cost(Err("x".into()))
        .describe()
        .contains("scope WAL unavailable (x)"));
}
