//! Unit tests of the claim: tokens carry their row; the group walk.

use super::*;

/// The group walk visits every group with unfinished rows once, in the order of their ids,
/// whether the next group differs in its target, its kind or its tenant, and each step is
/// one seek on the claim index (a scan of the groups before it was the cost of the row
/// value the walk used before groups had ids).
#[test]
fn the_group_walk_seeks_every_group_once() {
    let mut conn = Connection::open_in_memory().unwrap();
    let t0 = Timestamp::from_unix_millis(0).unwrap();
    crate::schema::migrate(&mut conn, Duration::from_secs(1), t0).unwrap();
    conn.execute(
        "INSERT INTO outbox_messages (id, tenant, topic, payload, available_at, created_at) \
         VALUES ('m', 'a', 't', X'7b7d', 0, 0)",
        [],
    )
    .unwrap();
    let rows = [
        ("b", "handler", "x", "pending"),
        ("a", "webhook", "e1", "held"),
        ("a", "handler", "y", "processing"),
        ("a", "handler", "x", "pending"),
        ("a", "handler", "x", "pending"),
        ("a", "handler", "w", "succeeded"),
        ("a", "email", "r", "dead"),
        ("c", "email", "r", "sending"),
    ];
    for (i, (tenant, kind, target, status)) in rows.iter().enumerate() {
        let k = DestinationKind::parse(kind).unwrap();
        let grp = crate::groups::group_id(&conn, tenant, k, target).unwrap();
        conn.execute(
            "INSERT INTO outbox_deliveries (id, message_id, tenant, topic, kind, target, \
                 status, attempts, snoozes, next_attempt_at, created_at, updated_at, grp) \
             VALUES (?1, 'm', ?2, 't', ?3, ?4, ?5, 0, 0, ?6, 0, 0, ?7)",
            params![
                format!("d{i}"),
                tenant,
                kind,
                target,
                status,
                10 - i as i64,
                grp
            ],
        )
        .unwrap();
    }
    let mut stmt = conn.prepare(NEXT_GROUP).unwrap();
    let mut after = i64::MIN;
    let mut walked = Vec::new();
    while let Some((grp, kind, target, due)) = stmt
        .query_row(params![after], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .optional()
        .unwrap()
    {
        walked.push(format!("{grp}:{kind}/{target}@{due}"));
        after = grp;
    }
    // Ids in the order the groups were first written: b/handler/x 1, a/webhook/e1 2,
    // a/handler/y 3, a/handler/x 4, a/handler/w 5 (finished), a/email/r 6 (finished),
    // c/email/r 7.
    assert_eq!(
        walked,
        [
            "1:handler/x@10",
            "2:webhook/e1@9",
            "3:handler/y@8",
            "4:handler/x@6",
            "7:email/r@3"
        ],
        "finished rows are no group; each group's earliest row"
    );
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {NEXT_GROUP}"))
        .unwrap()
        .query_map(params![4], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let seeks = plan
        .iter()
        .filter(|l| l.starts_with("SEARCH outbox_deliveries USING INDEX outbox_deliveries_claim"))
        .count();
    assert_eq!(seeks, 1, "{plan:?}");
    assert!(
        plan.iter()
            .all(|l| !l.starts_with("SCAN outbox_deliveries")),
        "{plan:?}"
    );
}

#[test]
fn tokens_carry_their_row() {
    let random: Vec<u8> = (0..16).collect();
    for seq in [0, 1, 255, 1 << 40, TOKEN_SEQ_MAX] {
        let t = token_for(seq, &random);
        assert_eq!(seq_of_token(&t), Some(seq));
        assert_eq!(t.as_uuid().get_version_num(), 8);
    }
    let t = token_for(TOKEN_SEQ_MAX + 1, &random);
    assert_eq!(
        seq_of_token(&t),
        None,
        "too large: a random token, found by id"
    );
    let other = ClaimToken::from_uuid(uuid::Builder::from_random_bytes([7; 16]).into_uuid());
    assert_eq!(seq_of_token(&other), None);
}
