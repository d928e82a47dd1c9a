//! `outbox migrate --print-sql`: the schema for users' own migration tools, printed without
//! connecting to anything or creating anything.

use crate::{outbox, sqlite_url};

#[test]
fn print_sql_prints_each_schema_and_touches_nothing() {
    // Port 1 answers nobody: a connection attempt would fail the command.
    let pg = outbox(&[
        "migrate",
        "--store",
        "postgres://nobody@127.0.0.1:1/app",
        "--namespace",
        "billing_outbox",
        "--print-sql",
    ])
    .ok();
    assert!(
        pg.contains("CREATE SCHEMA IF NOT EXISTS \"billing_outbox\";"),
        "{pg}"
    );
    assert!(pg.contains("\"billing_outbox\".schema_migrations"), "{pg}");
    assert!(pg.contains("-- migration 1: init"), "{pg}");

    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let lite = outbox(&["migrate", "--store", &url, "--print-sql"]).ok();
    assert!(
        lite.contains("CREATE TABLE IF NOT EXISTS outbox_schema_version"),
        "{lite}"
    );
    assert!(lite.contains("-- migration 1"), "{lite}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no file was created"
    );

    let redis = outbox(&["migrate", "--store", "redis://127.0.0.1:1", "--print-sql"]);
    assert_eq!(redis.code, 2, "{redis:?}");
    assert!(redis.stderr.contains("--print-sql"), "{redis:?}");

    let bad = outbox(&[
        "migrate",
        "--store",
        "postgres://nobody@127.0.0.1:1/app",
        "--namespace",
        "Bad-Name",
        "--print-sql",
    ]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stdout.is_empty(), "{bad:?}");
}
