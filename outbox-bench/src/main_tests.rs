//! Unit tests of `main.rs`: argument parsing, skipped backends and `--only`.

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
        let needs_backend =
            key.starts_with("pg-") || key.starts_with("redis-") || key.starts_with("broker-");
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
