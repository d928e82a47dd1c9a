//! The SQL enqueue function `<schema>.enqueue(…)` against `enqueue_in`: the same cases through
//! both, each in a transaction rolled back afterwards, compared row by row — the message, its
//! deliveries in fan-out order (kind, target, state, hold, key hash, id layout) and the
//! result; and every invalid input refused by both with the same message, nothing written.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::endpoint::DISABLED_HOLD;
use outboxkit_core::{
    Clock, Consumer, ConsumerName, DisabledReason, Endpoint, EndpointId, EndpointStatus,
    EndpointStore, EndpointUrl, Ledger, MessageStore, NewMessage, OsEntropy, SealedSecret,
    SystemClock, TenantId, Timestamp, TopicFilter,
};
use outboxkit_postgres::sqlx::{self, postgres::PgConnection, Row};
use outboxkit_postgres::{PostgresConfig, PostgresStore};
use uuid::Uuid;

use crate::support::{count, with_db, TestDb};

/// One way to enqueue a case.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    Rust,
    Sql,
}

/// What a case sends: the fields both paths take.
#[derive(Clone, Debug, Default)]
pub(crate) struct Case {
    pub tenant: Option<String>,
    pub topic: String,
    pub payload: String,
    pub ordering_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub available_at: Option<i64>,
    pub headers: Vec<(String, String)>,
    pub recipients: Vec<String>,
}

impl Case {
    pub(crate) fn new(topic: &str) -> Case {
        Case {
            topic: topic.to_owned(),
            payload: r#"{"n": 1,  "b": [2, 1], "a": "x"}"#.to_owned(),
            ..Case::default()
        }
    }

    pub(crate) fn message(&self) -> NewMessage {
        let mut m = NewMessage::raw(self.topic.clone(), self.payload.clone().into_bytes());
        if let Some(t) = &self.tenant {
            m = m.tenant(t.clone());
        }
        if let Some(k) = &self.ordering_key {
            m = m.ordering_key(k.clone());
        }
        if let Some(k) = &self.idempotency_key {
            m = m.idempotency_key(k.clone());
        }
        if let Some(at) = self.available_at {
            m = m.available_at(Timestamp::from_unix_millis(at).unwrap());
        }
        for (k, v) in &self.headers {
            m = m.header(k.clone(), v);
        }
        for r in &self.recipients {
            m = m.email(r.clone());
        }
        m
    }
}

/// The result and the rows one enqueue wrote, with times relative to the message's creation.
#[derive(Debug, PartialEq)]
pub(crate) struct Written {
    pub deliveries: i64,
    pub duplicate: bool,
    pub message: Vec<Option<String>>,
    /// Per delivery in `seq` order: kind, target, state, due_at − created_at (`i64::MAX`: for
    /// ever), key hash,
    /// and its position in the fan-out as its id says.
    pub rows: Vec<(String, String, i16, i64, Option<i64>, i64)>,
}

async fn enqueue(
    store: &PostgresStore,
    conn: &mut PgConnection,
    path: Path,
    case: &Case,
) -> Result<(Uuid, i64, bool), String> {
    match path {
        Path::Rust => store
            .enqueue_in(conn, case.message())
            .await
            .map(|e| (e.message_id.as_uuid(), i64::from(e.deliveries), e.duplicate))
            .map_err(|e| e.to_string()),
        Path::Sql => {
            let headers = (!case.headers.is_empty()).then(|| {
                serde_json::Value::Object(
                    case.headers
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect(),
                )
                .to_string()
            });
            let schema = &store.config().schema;
            // $1 tenant, $2 topic, $3 payload, $4 ordering key, $5 idempotency key,
            // $6 available_at (ms), $7 headers, $8 recipients.
            let q = format!(
                "SELECT message_id, deliveries, duplicate FROM \"{schema}\".enqueue($1, $2, $3::json, \
                 $4, $5, timestamptz 'epoch' + $6::int8 * interval '1 millisecond', $7::jsonb, $8)"
            );
            let row = sqlx::query(sqlx::AssertSqlSafe(q.to_string()))
                .bind(case.tenant.as_deref())
                .bind(&case.topic)
                .bind(&case.payload)
                .bind(case.ordering_key.as_deref())
                .bind(case.idempotency_key.as_deref())
                .bind(case.available_at)
                .bind(headers)
                .bind((!case.recipients.is_empty()).then_some(&case.recipients))
                .fetch_one(&mut *conn)
                .await
                .map_err(|e| match e.as_database_error() {
                    Some(d) => d.message().to_owned(),
                    None => e.to_string(),
                })?;
            Ok((
                row.get("message_id"),
                i64::from(row.get::<i32, _>("deliveries")),
                row.get("duplicate"),
            ))
        }
    }
}

pub(crate) async fn rows_of(
    db: &TestDb,
    conn: &mut PgConnection,
    id: Uuid,
    at: Option<i64>,
) -> Written {
    let s = format!("\"{}\"", db.schema);
    let m = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT tenant, topic, convert_from(payload, 'UTF8') AS payload, ordering_key, \
                idempotency_key, available_at, headers, cause, \
                created_at FROM {s}.messages WHERE id = $1"
    )))
    .bind(id)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let created: i64 = m.get("created_at");
    // A time is relative to the message's creation, or `i64::MIN` for the case's own
    // `available_at` (the same instant on both paths).
    let rel = |t: i64| if Some(t) == at { i64::MIN } else { t - created };
    let avail = rel(m.get("available_at")).to_string();
    let mut message: Vec<Option<String>> = [
        "tenant",
        "topic",
        "payload",
        "ordering_key",
        "idempotency_key",
        "headers",
        "cause",
    ]
    .iter()
    .map(|c| m.get::<Option<String>, _>(*c))
    .collect();
    message.push(Some(avail));
    let d = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT g.kind, g.target, q.state, q.due_at, q.key_hash, q.id FROM {s}.queue q \
           JOIN {s}.groups g ON g.id = q.group_id WHERE q.message_id = $1 ORDER BY q.seq"
    )))
    .bind(id)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let ids: Vec<Uuid> = d.iter().map(|r| r.get("id")).collect();
    let low = |u: &Uuid| i64::from_be_bytes(u.as_bytes()[8..].try_into().unwrap());
    let rows = d
        .iter()
        .zip(&ids)
        .map(|(r, u)| {
            assert_eq!(u.get_version_num(), 7, "a delivery id is a UUIDv7");
            assert_eq!(
                u.as_bytes()[..8],
                ids[0].as_bytes()[..8],
                "one base per message"
            );
            let due: i64 = r.get("due_at");
            // A paused endpoint's hold is for ever: the same instant whenever it was written.
            let due = if due == Timestamp::MAX.as_unix_millis() {
                i64::MAX
            } else {
                rel(due)
            };
            (
                r.get("kind"),
                r.get("target"),
                r.get("state"),
                due,
                r.get("key_hash"),
                low(u) ^ low(&ids[0]) ^ 1,
            )
        })
        .collect();
    Written {
        deliveries: 0,
        duplicate: false,
        message,
        rows,
    }
}

/// Run `cases` (a sequence: later ones may repeat an earlier key) on `path` in one
/// transaction, rolled back: what each wrote, or its error.
async fn run(
    db: &TestDb,
    store: &PostgresStore,
    path: Path,
    cases: &[Case],
) -> Vec<Result<Written, String>> {
    let mut tx = store.pool().begin().await.unwrap();
    let mut out = Vec::new();
    let mut firsts: Vec<Uuid> = Vec::new();
    for case in cases {
        match enqueue(store, &mut tx, path, case).await {
            Ok((id, deliveries, duplicate)) => {
                assert_eq!(
                    id.get_version_num(),
                    7,
                    "{path:?}: a message id is a UUIDv7"
                );
                let mut w = rows_of(db, &mut tx, id, case.available_at).await;
                if duplicate {
                    // The first message's rows: compare which earlier case it names.
                    let k = firsts.iter().position(|f| *f == id);
                    w.message = vec![Some(format!("duplicate of case {k:?}"))];
                    w.rows.clear();
                }
                firsts.push(id);
                w.deliveries = deliveries;
                w.duplicate = duplicate;
                out.push(Ok(w));
            }
            Err(e) => {
                out.push(Err(e));
                // An error aborts the SQL path's transaction: start a new one (nothing of
                // the failed call may remain).
                tx.rollback().await.unwrap();
                tx = store.pool().begin().await.unwrap();
                firsts.clear();
            }
        }
    }
    tx.rollback().await.unwrap();
    out
}

pub(crate) fn endpoint(
    tenant: &str,
    filter: &str,
    status: EndpointStatus,
    at: Timestamp,
) -> Endpoint {
    Endpoint {
        id: EndpointId::generate(at, &OsEntropy),
        tenant: TenantId::new(tenant).unwrap(),
        url: EndpointUrl::parse("https://hooks.example.com/in").unwrap(),
        description: "sql enqueue".to_owned(),
        filter: TopicFilter::parse(filter).unwrap(),
        status,
        secret: SealedSecret(vec![1, 2, 3, 4, 5, 6, 7, 8]),
        previous_secret: None,
        headers: vec![],
        body_format: Default::default(),
        rate_limit: None,
        fifo: false,
        last_delivery: None,
        created_at: at,
        updated_at: at,
    }
}

/// Consumers and endpoints that every filter form and hold reaches.
pub(crate) async fn routes(store: &PostgresStore) {
    for (name, filter) in [
        ("all", "*"),
        ("orders", "order.*"),
        ("created", "order.created"),
        ("invoices", "invoice.paid"),
    ] {
        let c = Consumer {
            name: ConsumerName::new(name).unwrap(),
            filter: TopicFilter::parse(filter).unwrap(),
            created_at: SystemClock.now(),
            status: outboxkit_core::ConsumerStatus::Active,
        };
        store.put_consumer(&c).await.unwrap();
    }
    // A paused consumer: its delivery is written held, by the function as by `enqueue_in`.
    store
        .set_consumer_status(
            &ConsumerName::new("orders").unwrap(),
            outboxkit_core::ConsumerStatus::Paused,
        )
        .await
        .unwrap();
    let base = SystemClock.now();
    let at = |k: u64| base.saturating_add(Duration::from_millis(k));
    for (k, (tenant, filter, status)) in [
        ("acme", "*", EndpointStatus::Active),
        ("acme", "order.*", EndpointStatus::Paused),
        (
            "acme",
            "order.created",
            EndpointStatus::Disabled(DisabledReason::Manual),
        ),
        ("acme", "invoice.*", EndpointStatus::Active),
        ("other", "*", EndpointStatus::Active),
    ]
    .into_iter()
    .enumerate()
    {
        let e = endpoint(tenant, filter, status, at(k as u64));
        store.create_endpoint(&e).await.unwrap();
    }
}

/// A message of every fan-out form `routes` reaches: each tenant, filter form and hold, an
/// ordering key with a delay, headers and recipients (one repeated), a past `available_at`, a
/// JSON array payload.
pub(crate) fn fanout_cases() -> Vec<Case> {
    let far = SystemClock.now().as_unix_millis() + 3_600_000;
    let past = SystemClock.now().as_unix_millis() - 3_600_000;
    let acme = |c: &mut Case| c.tenant = Some("acme".to_owned());
    vec![
        Case::new("order.created"),
        with(acme, "order.created"),
        with(acme, "order.shipped.late"),
        with(acme, "invoice.paid"),
        with(acme, "order"),
        with(|c| c.tenant = Some("nobody".to_owned()), "misc"),
        with(
            |c| {
                acme(c);
                c.ordering_key = Some("order:42".to_owned());
                c.available_at = Some(far);
                c.headers = vec![
                    ("x-b".to_owned(), "two\tcols \"quoted\" \\ é".to_owned()),
                    ("X-A".to_owned(), "one".to_owned()),
                    ("trace.id".to_owned(), String::new()),
                ];
                c.recipients = vec![
                    "b@example.com".to_owned(),
                    "a@example.com".to_owned(),
                    "b@example.com".to_owned(),
                ];
            },
            "order.created",
        ),
        with(|c| c.available_at = Some(past), "order.created"),
        with(|c| c.payload = "[]".to_owned(), "invoice.paid"),
    ]
}

/// Commit `tx`: `listener` hears nothing before the commit and the store's wake-up after it.
pub(crate) async fn commit_wakes(
    store: &PostgresStore,
    listener: &mut sqlx::postgres::PgListener,
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
) {
    let early = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(
        early.is_err(),
        "a NOTIFY reached a listener before the commit"
    );
    tx.commit().await.unwrap();
    let n = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a wake-up after the commit")
        .unwrap();
    assert_eq!(n.channel(), store.config().channel());
}

pub(crate) fn with(f: impl Fn(&mut Case), topic: &str) -> Case {
    let mut c = Case::new(topic);
    f(&mut c);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_function_writes_what_enqueue_in_writes() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("sqlfn"), 2).await, Arc::new(SystemClock))
            .await;
        routes(&store).await;
        let cases = fanout_cases();
        let rust = run(&db, &store, Path::Rust, &cases).await;
        let sql = run(&db, &store, Path::Sql, &cases).await;
        for (i, (r, s)) in rust.iter().zip(&sql).enumerate() {
            assert_eq!(r, s, "case {i}: {:?}", cases[i]);
            assert!(r.is_ok(), "case {i} should be accepted: {r:?}");
        }
        // The held deliveries: a paused endpoint for ever, a disabled one for DISABLED_HOLD.
        let acme_created = rust[1].as_ref().unwrap();
        let holds: Vec<_> = acme_created.rows.iter().map(|r| (r.2, r.3)).collect();
        assert!(
            holds.contains(&(1, DISABLED_HOLD.as_millis() as i64)),
            "{holds:?}"
        );
        assert!(holds.contains(&(1, i64::MAX)), "{holds:?}");
        // worker, all, orders, created; acme's `*`, `order.*` (paused), `order.created`.
        assert_eq!(acme_created.rows.len(), 4 + 3, "{:?}", acme_created.rows);

        // Idempotency: a repeat in the same transaction, and after the first committed.
        fn key(k: &'static str) -> impl Fn(&mut Case) {
            move |c: &mut Case| c.idempotency_key = Some(k.to_owned())
        }
        let repeats = vec![
            with(key("k-1"), "order.created"),
            with(key("k-1"), "order.created"),
            with(key("k-1"), "order.shipped"),
            with(key("k-2"), "order.created"),
        ];
        let r = run(&db, &store, Path::Rust, &repeats).await;
        let s = run(&db, &store, Path::Sql, &repeats).await;
        assert_eq!(r, s);
        let dup = r[1].as_ref().unwrap();
        assert!(dup.duplicate && dup.deliveries == 0);
        assert_eq!(
            dup.message,
            vec![Some("duplicate of case Some(0)".to_owned())]
        );
        assert!(!r[2].as_ref().unwrap().duplicate, "the key is per topic");

        // A committed message with the key: both paths answer with its id.
        let first = store
            .enqueue(NewMessage::new("order.created", serde_json::json!({})).idempotency_key("k-9"))
            .await
            .unwrap();
        for path in [Path::Rust, Path::Sql] {
            let mut tx = store.pool().begin().await.unwrap();
            let got = enqueue(&store, &mut tx, path, &with(key("k-9"), "order.created"))
                .await
                .unwrap();
            assert_eq!(got, (first.message_id.as_uuid(), 0, true), "{path:?}");
            tx.rollback().await.unwrap();
        }
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_refuse_the_same_inputs_with_the_same_message() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("sqlbad"), 2).await, Arc::new(SystemClock))
            .await;
        let too_far = SystemClock.now().as_unix_millis() + 366 * 86_400_000;
        let bad: Vec<Case> = vec![
            Case::new(""),
            Case::new(&"a".repeat(129)),
            Case::new("Order.created"),
            Case::new("order..created"),
            Case::new("order.cre@ted"),
            Case::new("order._x"),
            with(
                |c| c.payload = format!("\"{}\"", "x".repeat(256 * 1024)),
                "order.created",
            ),
            with(|c| c.tenant = Some(String::new()), "order.created"),
            with(|c| c.tenant = Some("a b".to_owned()), "order.created"),
            with(|c| c.tenant = Some("t".repeat(65)), "order.created"),
            with(
                |c| c.ordering_key = Some("has space".to_owned()),
                "order.created",
            ),
            with(|c| c.ordering_key = Some("k".repeat(201)), "order.created"),
            with(|c| c.idempotency_key = Some(String::new()), "order.created"),
            with(|c| c.available_at = Some(too_far), "order.created"),
            with(
                |c| c.headers = (0..65).map(|i| (format!("h{i}"), "v".to_owned())).collect(),
                "order.created",
            ),
            with(
                |c| c.headers = vec![("a b".to_owned(), "v".to_owned())],
                "order.created",
            ),
            with(
                |c| c.headers = vec![("h".to_owned(), "a\nb".to_owned())],
                "order.created",
            ),
            with(
                |c| c.headers = vec![("h".to_owned(), "v".repeat(8193))],
                "order.created",
            ),
            with(
                |c| c.recipients = (0..101).map(|i| format!("u{i}@example.com")).collect(),
                "order.created",
            ),
            with(|c| c.recipients = vec!["  ".to_owned()], "order.created"),
            with(
                |c| c.recipients = vec!["a\u{7}b@example.com".to_owned()],
                "order.created",
            ),
        ];
        for case in &bad {
            let rust = run(&db, &store, Path::Rust, std::slice::from_ref(case)).await;
            let sql = run(&db, &store, Path::Sql, std::slice::from_ref(case)).await;
            let (Err(r), Err(s)) = (&rust[0], &sql[0]) else {
                panic!("both must refuse {case:?}: {rust:?} / {sql:?}");
            };
            assert_eq!(r, s, "{case:?}");
            assert!(r.starts_with("invalid input: "), "{r}");
        }
        // What only SQL can be given: a NULL payload, headers that are not strings.
        let mut conn = store.pool().acquire().await.unwrap();
        let s = format!("\"{}\"", db.schema);
        for (call, why) in [
            (
                format!("{s}.enqueue('default', 'order.created', NULL)"),
                "invalid input: payload: must not be NULL",
            ),
            (
                format!("{s}.enqueue('default', 'order.created', '{{}}', headers => '[1]')"),
                "invalid input: headers: must be a JSON object of strings",
            ),
            (
                format!(
                    "{s}.enqueue('default', 'order.created', '{{}}', headers => '{{\"h\": 1}}')"
                ),
                "invalid input: headers: a header value must be a string",
            ),
            (
                format!("{s}.enqueue('default', 'order.created', 'not json')"),
                "invalid input syntax for type json",
            ),
        ] {
            let err = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT * FROM {call}")))
                .execute(&mut *conn)
                .await
                .unwrap_err();
            let msg = err.as_database_error().unwrap().message().to_owned();
            assert!(msg.starts_with(why), "{call}: {msg}");
        }
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 0);
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.queue").await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_wakes_listeners_at_commit_and_follows_the_stores_limits() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("sqlwake"), 2).await, Arc::new(SystemClock))
            .await;
        let s = format!("\"{}\"", db.schema);
        let mut listener = sqlx::postgres::PgListener::connect_with(store.pool())
            .await
            .unwrap();
        listener.listen(&store.config().channel()).await.unwrap();
        let call = format!("SELECT * FROM {s}.enqueue('default', 'order.created', '{{\"n\": 1}}')");

        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(call.to_string()))
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        let mut tx = store.pool().begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(call.to_string()))
            .execute(&mut *tx)
            .await
            .unwrap();
        commit_wakes(&store, &mut listener, tx).await;
        // Only the committed one was written; nothing was notified for the rolled-back one.
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 1);
        let more = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
        assert!(more.is_err(), "a second wake-up: {more:?}");

        // A store with other limits replaces the function at its migrate(); the same config
        // again leaves it (its comment's tag unchanged).
        let small = PostgresStore::new(
            store.pool().clone(),
            PostgresConfig {
                limits: outboxkit_core::Limits {
                    max_payload_bytes: 4,
                    ..Default::default()
                },
                ..PostgresConfig::new(db.schema.clone())
            },
            Arc::new(SystemClock),
            Arc::new(OsEntropy),
        )
        .unwrap();
        small.migrate().await.unwrap();
        let comment = format!(
            "SELECT obj_description(to_regprocedure('{s}.enqueue(text, text, json, text, text, \
             timestamptz, jsonb, text[])'), 'pg_proc')"
        );
        let tag: String = sqlx::query_scalar(sqlx::AssertSqlSafe(comment.to_string()))
            .fetch_one(store.pool())
            .await
            .unwrap();
        let err = sqlx::query(sqlx::AssertSqlSafe(call.to_string()))
            .execute(store.pool())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("is larger than the limit of 4 bytes"),
            "{err}"
        );
        small.migrate().await.unwrap();
        let again: String = sqlx::query_scalar(sqlx::AssertSqlSafe(comment.to_string()))
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(tag, again);
        store.migrate().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(call.to_string()))
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_script_installs_the_function() {
    with_db(|db| async move {
        let script = outboxkit_postgres::migration_script(&db.schema).unwrap();
        let mut tx = db.admin.begin().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(script.to_string()))
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let s = format!("\"{}\"", db.schema);
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT * FROM {s}.enqueue('acme', 'order.created', '{{\"n\": 1}}', 'k:1', 'idem-1', \
             now() + interval '1 hour', '{{\"h\": \"v\"}}', ARRAY['a@example.com'])"
        )))
        .fetch_one(&db.admin)
        .await
        .unwrap();
        assert_eq!(row.get::<i32, _>("deliveries"), 1, "the e-mail recipient");
        assert!(!row.get::<bool, _>("duplicate"));
        // migrate() afterwards finds the same function (and nothing else) to do.
        let store = db.store(db.pool(&db.app("script"), 1).await, Arc::new(SystemClock));
        assert_eq!(store.migrate().await.unwrap(), 0);
        let m = store
            .get_message(
                &TenantId::new("acme").unwrap(),
                outboxkit_core::MessageId::from_uuid(row.get("message_id")).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(m.payload, br#"{"n": 1}"#.to_vec());
        assert_eq!(m.headers.get("h").map(String::as_str), Some("v"));
    })
    .await;
}

/// The grants DEPLOYMENT.md names are enough for a role that only enqueues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_with_the_documented_grants_can_enqueue() {
    with_db(|db| async move {
        let store = db
            .ready_store(db.pool(&db.app("sqlrole"), 2).await, Arc::new(SystemClock))
            .await;
        routes(&store).await;
        let s = format!("\"{}\"", db.schema);
        let role = format!("\"{}_app\"", db.schema);
        let grants = format!(
            "CREATE ROLE {role} NOLOGIN; \
             GRANT USAGE ON SCHEMA {s} TO {role}; \
             GRANT SELECT, INSERT ON {s}.messages, {s}.queue TO {role}; \
             GRANT SELECT, INSERT, UPDATE ON {s}.groups TO {role}; \
             GRANT SELECT ON {s}.consumers, {s}.endpoints TO {role}; \
             GRANT USAGE ON SEQUENCE {s}.queue_seq TO {role};"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(grants.to_string()))
            .execute(&db.admin)
            .await
            .unwrap();
        let mut tx = db.admin.begin().await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET LOCAL ROLE {role}")))
            .execute(&mut *tx)
            .await
            .unwrap();
        let got = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT deliveries FROM {s}.enqueue('acme', 'order.created', '{{}}', \
             recipients => ARRAY['a@example.com'])"
        )))
        .fetch_one(&mut *tx)
        .await;
        let denied = sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {s}.queue")))
            .execute(&mut *tx)
            .await;
        drop(tx);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP OWNED BY {role}; DROP ROLE {role}"
        )))
        .execute(&db.admin)
        .await
        .unwrap();
        // worker, all, orders, created; acme's `*`, paused `order.*`, disabled `order.created`;
        // the recipient.
        assert_eq!(got.unwrap().get::<i32, _>("deliveries"), 8);
        assert!(denied.is_err(), "the role may only enqueue");
    })
    .await;
}

/// The function follows the event-type catalogue as `enqueue_in` does: in `refuse-unknown`
/// an unregistered topic is refused (nothing written); in `validate` a topic with a schema
/// is refused (PL/pgSQL cannot check a JSON Schema: the message says so) and one without a
/// schema is accepted; `off` accepts anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_follows_the_event_type_catalogue() {
    use outboxkit_core::{CatalogueMode, EventTypeStore, NewEventType, Topic};
    with_db(|db| async move {
        let store = db
            .ready_store(
                db.pool(&db.app("sqlcatalogue"), 2).await,
                Arc::new(SystemClock),
            )
            .await;
        let s = format!("\"{}\"", db.schema);
        let call = |topic: &str| {
            format!("SELECT * FROM {s}.enqueue('default', '{topic}', '{{\"id\": 1}}')")
        };
        let run = |topic: &str| {
            let q = call(topic);
            let pool = store.pool().clone();
            async move {
                sqlx::query(sqlx::AssertSqlSafe(q))
                    .execute(&pool)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        };
        run("any.thing").await.expect("mode off accepts anything");
        let with_schema = NewEventType::new(Topic::new("order.created").unwrap(), "")
            .schema(serde_json::json!({"type": "object"}));
        store.put_event_type(&with_schema).await.unwrap();
        let plain = NewEventType::new(Topic::new("order.noted").unwrap(), "");
        store.put_event_type(&plain).await.unwrap();
        store
            .set_catalogue_mode(CatalogueMode::RefuseUnknown)
            .await
            .unwrap();
        let e = run("order.paid").await.unwrap_err();
        assert!(
            e.contains("invalid input: topic") && e.contains("order.paid"),
            "{e}"
        );
        run("order.created").await.expect("registered");
        store
            .set_catalogue_mode(CatalogueMode::Validate)
            .await
            .unwrap();
        let e = run("order.created").await.unwrap_err();
        assert!(
            e.contains("invalid input: payload") && e.contains("JSON Schema"),
            "{e}"
        );
        assert!(run("order.paid").await.is_err());
        run("order.noted").await.expect("a type without a schema");
        assert_eq!(count(&db, "SELECT count(*) FROM {s}.messages").await, 3);
    })
    .await;
}
