//! The demo runs to completion and its figures add up.

use std::collections::HashMap;

use crate::outbox;

#[test]
fn the_demo_settles_and_its_figures_add_up() {
    let out = outbox(&["demo", "--events", "60", "--quiet"]).ok();
    let line = out
        .lines()
        .find(|l| l.starts_with("figures:"))
        .unwrap_or_else(|| panic!("no figures in {out}"));
    let f: HashMap<&str, u64> = line
        .trim_start_matches("figures:")
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k, v.parse().unwrap())
        })
        .collect();
    assert_eq!(
        f["succeeded"] + f["dead"],
        f["deliveries"],
        "every delivery ends succeeded or dead: {line}"
    );
    assert!(f["deliveries"] > 60, "{line}");
    assert!(
        f["retried"] > 0 && f["held_released"] > 0 && f["replayed"] > 0,
        "{line}"
    );
    assert_eq!(
        f["replayed_succeeded"], f["replayed"],
        "replayed deliveries succeed: {line}"
    );
    assert!(f["dead"] > 0, "poison events stay dead: {line}");
    assert!(out.contains("deliveries by status"));
    assert!(out.contains("the attempts of one retried delivery"));
}
