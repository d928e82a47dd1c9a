//! Unit tests of `counts.rs`: reading callgrind's files and annotations, the per-delivery
//! difference and the rows.

use super::*;

#[test]
fn totals_and_thread_numbers_are_read_from_the_file() {
    let text =
        "version: 1\ncmd: x\npart: 1\nthread: 2\nevents: Ir\nfn=(1) main\n5 10\ntotals: 123456\n";
    assert_eq!(parse_totals(text), (Some(2), 123_456.0));
    assert_eq!(parse_totals("summary: 77\n"), (None, 77.0));
    assert_eq!(parse_totals("nothing here\n"), (None, 0.0));
}

#[test]
fn inclusive_counts_take_each_function_once_and_sum_the_functions() {
    let annotate = "\
--------------------------------------------------------------------------------
Ir                  file:function
--------------------------------------------------------------------------------
9,000,000 (100.0%)  PROGRAM TOTALS
1,200,000 (13.3%)  ???:outboxkit_core::webhook_request::signed_request [/x/outbox-bench]
  300,000 ( 3.3%)  /x/settle.rs:outboxkit_dispatch::settle::settle::{{closure}} [/x/outbox-bench]
  100,000 ( 1.1%)  /x/alloc.rs:outboxkit_dispatch::settle::settle::{{closure}}
      500           ???:unrelated [/x/outbox-bench]
";
    assert_eq!(
        inclusive(
            annotate,
            &["outboxkit_core::webhook_request::signed_request"]
        ),
        1_200_000.0
    );
    assert_eq!(
        inclusive(annotate, &["outboxkit_dispatch::settle::settle"]),
        300_000.0
    );
    assert_eq!(
        inclusive(
            annotate,
            &[
                "outboxkit_dispatch::settle::settle",
                "outboxkit_core::webhook_request::signed_request"
            ]
        ),
        1_500_000.0
    );
    assert_eq!(inclusive(annotate, &["absent"]), 0.0);
    // The same entry with and without its object counts once; the entry of an inlined
    // file repeats calls its function's own entry holds (callgrind_annotate lists a call
    // made from inlined code under both), so the largest entry is the function's count.
    let twice = "\
 1,000 (1.0%)  /x/core.rs:outboxkit_core::webhook_request::signed_request [/x/bin]
 1,000 (1.0%)  /x/core.rs:outboxkit_core::webhook_request::signed_request
    50         /x/alloc.rs:outboxkit_core::webhook_request::signed_request
";
    assert_eq!(
        inclusive(twice, &["outboxkit_core::webhook_request::signed_request"]),
        1_000.0
    );
}

fn counts(sender: f64, receiver: f64, parts: &[(&str, f64)], claims: f64) -> Counts {
    Counts {
        sender,
        receiver,
        parts: parts.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect(),
        claims_per_delivery: claims,
    }
}

#[test]
fn per_delivery_is_the_difference_over_the_deliveries() {
    let small = counts(1_000.0, 100.0, &[("signing", 10.0)], 1.0);
    let large = counts(11_000.0, 1_100.0, &[("signing", 510.0)], 1.0);
    let d = large.per_delivery(&small, 100.0);
    assert_eq!(d.sender, 100.0);
    assert_eq!(d.receiver, 10.0);
    assert_eq!(d.part("signing"), 5.0);
    assert_eq!(d.part("absent"), 0.0);
}

#[test]
fn rows_hold_raw_over_ours_to_the_targets() {
    let m = Measured {
        sides: vec![
            (
                "ours".to_owned(),
                counts(
                    200_000.0,
                    50_000.0,
                    &[("signing", 8_000.0), ("send", 90_000.0)],
                    1.0,
                ),
            ),
            (
                "null".to_owned(),
                counts(
                    30_000.0,
                    0.0,
                    &[
                        ("signing", 8_000.0),
                        ("claim", 4_000.0),
                        ("settle", 6_000.0),
                    ],
                    1.0,
                ),
            ),
            ("raw".to_owned(), counts(120_000.0, 50_000.0, &[], 0.0)),
        ],
    };
    let rows = rows(&m);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].key, "webhook-instructions-per-delivery");
    assert_eq!(rows[0].ratio, Some(0.6));
    assert_eq!(rows[0].status, Status::Pass);
    // engine = null sender − signing; transport = ours sender − null sender
    assert!(rows[0].note.contains("engine 22.0k"), "{}", rows[0].note);
    assert!(
        rows[0].note.contains("transport 170.0k"),
        "{}",
        rows[0].note
    );
    assert_eq!(rows[1].key, "noop-instructions-per-delivery");
    assert_eq!(rows[1].ratio, Some(4.0));
    assert_eq!(rows[1].status, Status::Pass);
}
