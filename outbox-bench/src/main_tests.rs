//! Unit tests of `main.rs`: argument parsing, skipped backends, `--only`, noisy rows.

use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn arguments_parse() {
    let a = parse_args(&strings(&["--quick", "--only", "pg,redis-dispatch"])).unwrap();
    assert!(a.quick);
    assert_eq!(a.only, vec!["pg", "redis-dispatch"]);
    assert_eq!(
        parse_args(&strings(&["--size", "50_000"])).unwrap().size,
        Some(50_000)
    );
    let c = parse_args(&strings(&["--child-rss", "s1", "10000"])).unwrap();
    assert_eq!(c.child, Some(("s1".to_owned(), 10_000)));
    let n = parse_args(&strings(&["--child-count", "ours", "1200"])).unwrap();
    assert_eq!(n.count_child, Some(("ours".to_owned(), 1200)));
    assert!(parse_args(&strings(&["--child-count", "ours"])).is_err());
    assert!(parse_args(&strings(&["--only"])).is_err());
    assert!(parse_args(&strings(&["--fast"])).is_err());
    assert_eq!(parse_args(&strings(&["--help"])).unwrap_err(), "");
}

#[test]
fn unreachable_backends_skip_every_row_of_their_scenarios() {
    let rows = skipped_rows("pg-enqueue", "postgres unreachable");
    assert_eq!(rows.len(), 4);
    assert!(rows
        .iter()
        .all(|r| r.status == Status::Skipped("postgres unreachable".into())));
    for (key, _) in SCENARIOS {
        let needs_backend = key.starts_with("pg-")
            || key.starts_with("pgmq-")
            || key.starts_with("redis-")
            || key.starts_with("broker-");
        assert_eq!(!skipped_rows(key, "x").is_empty(), needs_backend, "{key}");
    }
}

#[test]
fn only_matches_substrings_of_keys() {
    assert!(selected(&[], "webhook"));
    let only = strings(&["pg"]);
    assert!(selected(&only, "pg-dispatch"));
    assert!(!selected(&only, "sqlite-dispatch"));
    let only = strings(&["dispatch"]);
    assert!(selected(&only, "redis-dispatch"));
    assert!(!selected(&only, "pg-bulk"));
}

#[test]
fn a_busy_machine_makes_measured_rows_noisy() {
    let measured = || {
        Row::measured(
            "pgmq-drain",
            "x",
            "1k",
            report::Figure::rate(90.0),
            Some(report::Figure::rate(100.0)),
            report::Target::MinRatio(1.0),
            "",
        )
    };
    let error = || {
        Row::not_run(
            "pgmq-bulk",
            "x",
            report::Target::None,
            Status::Error("down".into()),
        )
    };
    // Quiet before and no other CPU (or an unreadable load): the verdicts stand.
    for (before, others) in [(Some(0.3), 0.1), (None, 0.0), (Some(1.0), 0.25)] {
        let mut rows = vec![measured(), error()];
        mark_noisy(&mut rows, before, others);
        assert_eq!(rows[0].status, Status::Fail, "{before:?} {others:?}");
        assert_eq!(rows[1].status, Status::Error("down".into()));
    }
    // Busy before, or other processes busy during: measured rows are noisy and keep what
    // they would have been; rows that did not run keep their status.
    for (before, others) in [(Some(1.01), 0.0), (Some(0.5), 0.3), (None, 1.5)] {
        let mut rows = vec![measured(), error()];
        mark_noisy(&mut rows, before, others);
        let Status::Noisy(why) = &rows[0].status else {
            panic!("{:?}", rows[0].status)
        };
        assert!(why.contains("would be FAIL"), "{why}");
        assert!(why.starts_with("load "), "{why}");
        assert_eq!(rows[1].status, Status::Error("down".into()));
    }
    let mut rows = vec![measured()];
    mark_noisy(&mut rows, Some(1.5), 0.0);
    assert_eq!(
        rows[0].status,
        Status::Noisy("load 1.50 before, other processes 0.00 cores; would be FAIL".into())
    );
    assert_eq!(rows[0].status.word(), "noisy");
    assert!(text_table(&rows)
        .contains("noisy (load 1.50 before, other processes 0.00 cores; would be FAIL)"));
}

#[test]
fn every_peer_row_is_in_the_catalogue() {
    let keys: Vec<&str> = BACKEND_ROWS
        .iter()
        .filter(|r| r.0.starts_with("pgmq-"))
        .map(|r| r.1)
        .collect();
    assert_eq!(
        keys,
        [
            "pgmq-drain",
            "pgmq-drain-delete",
            "pg-wal-per-delivery",
            "pg-index-writes-per-delivery",
            "pg-hot-ratio",
            "pgmq-enqueue",
            "pgmq-enqueue-in",
            "pgmq-bulk"
        ]
    );
    for (scenario, ..) in BACKEND_ROWS {
        assert!(SCENARIOS.iter().any(|s| s.0 == *scenario), "{scenario}");
    }
    let rows = skipped_rows("pgmq-drain", "postgres unreachable");
    assert_eq!(rows.len(), 5);
}
