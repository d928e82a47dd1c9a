//! LISTEN/NOTIFY: a wake listener is woken by an enqueue from another pool, and still after
//! its listener connection is terminated.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::OperatorStore;
use outboxkit_core::{
    Clock, DeliveryStore, MessageStore, OsEntropy, Stopwatch, SystemClock, WakeListener,
};
use outboxkit_postgres::{sqlx, PostgresConfig, PostgresStore};

use crate::support::{order, with_db, TestDb};

/// Far below any poll interval a dispatcher would use (30 s), and generous for a slow CI.
const DEADLINE: Duration = Duration::from_secs(10);

async fn woken(listener: &mut WakeListener) -> bool {
    tokio::time::timeout(DEADLINE, listener.woken())
        .await
        .is_ok()
}

/// The pid of the backend listening for `app`, once it is listening (and is not `old`).
async fn listening_backend(db: &TestDb, app: &str, old: Option<i32>) -> i32 {
    let watch = Stopwatch::start();
    loop {
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
              WHERE application_name = $1 AND query LIKE 'LISTEN%' AND pid <> $2",
        )
        .bind(app)
        .bind(old.unwrap_or(0))
        .fetch_optional(&db.admin)
        .await
        .unwrap();
        if let Some(pid) = pid {
            return pid;
        }
        assert!(watch.elapsed() < DEADLINE, "no listening backend appeared");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Swallow a wake-up that may already be pending (none is fine).
async fn drain(listener: &mut WakeListener) {
    let _ = tokio::time::timeout(Duration::ZERO, listener.woken()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_from_another_pool_wakes_the_listener_even_after_a_cut() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let app = db.app("listen");
        let listening = db.ready_store(db.pool(&app, 2).await, clock.clone()).await;
        let writer = db.store(db.pool(&db.app("writer"), 2).await, clock);

        let mut listener = listening
            .wake_listener()
            .expect("postgres has a wake listener");
        // The listener wakes once when it (re)connects: nothing sent before was seen.
        assert!(woken(&mut listener).await, "no wake-up after connecting");
        let pid = listening_backend(&db, &app, None).await;

        writer.enqueue(order(1)).await.unwrap();
        assert!(
            woken(&mut listener).await,
            "an enqueue did not wake the listener"
        );

        // Cut the listener's connection; it reconnects and listens again.
        let cut: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&db.admin)
            .await
            .unwrap();
        assert!(cut);
        listening_backend(&db, &app, Some(pid)).await;
        assert!(woken(&mut listener).await, "no wake-up after reconnecting");
        drain(&mut listener).await;

        writer.enqueue(order(2)).await.unwrap();
        assert!(
            woken(&mut listener).await,
            "an enqueue after the cut did not wake the listener"
        );

        // Enqueue inside a transaction wakes once it commits.
        let mut tx = writer.pool().begin().await.unwrap();
        writer.enqueue_in(&mut tx, order(3)).await.unwrap();
        tx.commit().await.unwrap();
        assert!(
            woken(&mut listener).await,
            "a committed enqueue_in did not wake"
        );
        assert_eq!(listening.stats().await.unwrap().pending, 3);
    })
    .await;
}

/// Run `produce` against a store of its own on a runtime of its own, then drop the runtime
/// at once, as a process that exits right after its enqueue (`outbox enqueue`, a cron job)
/// does: every task the store started dies with it.
fn in_an_exiting_process<F, Fut>(db: &Arc<TestDb>, produce: F)
where
    F: FnOnce(PostgresStore) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let db = db.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let pool = db.pool(&db.app("exiting"), 1).await;
            produce(db.store(pool, Arc::new(SystemClock))).await;
        });
        rt.shutdown_background();
    })
    .join()
    .expect("the producer thread");
}

/// A committed `enqueue` or `enqueue_batch` wakes a listening dispatcher even when the
/// producer exits right after it returns: the `NOTIFY` is sent before it returns, not owed
/// to a task that dies with the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_that_exits_right_after_enqueue_still_wakes_the_listener() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let app = db.app("listen4");
        let listening = db.ready_store(db.pool(&app, 2).await, clock).await;
        let mut listener = listening
            .wake_listener()
            .expect("postgres has a wake listener");
        assert!(woken(&mut listener).await, "no wake-up after connecting");
        listening_backend(&db, &app, None).await;
        drain(&mut listener).await;

        in_an_exiting_process(&db, |writer| async move {
            writer.enqueue(order(1)).await.unwrap();
        });
        assert!(
            woken(&mut listener).await,
            "an enqueue by a producer that exited did not wake the listener"
        );
        drain(&mut listener).await;

        in_an_exiting_process(&db, |writer| async move {
            writer
                .enqueue_batch(vec![order(2), order(3)])
                .await
                .unwrap();
        });
        assert!(
            woken(&mut listener).await,
            "an enqueue_batch by a producer that exited did not wake the listener"
        );
        drain(&mut listener).await;

        in_an_exiting_process(&db, |writer| async move {
            let mut tx = writer.pool().begin().await.unwrap();
            writer.enqueue_in(&mut tx, order(4)).await.unwrap();
            tx.commit().await.unwrap();
        });
        assert!(
            woken(&mut listener).await,
            "an enqueue_in committed by a producer that exited did not wake the listener"
        );
        assert_eq!(listening.stats().await.unwrap().pending, 4);
    })
    .await;
}

/// The pid of the notifier backend of the store whose pool is named `app`, once it has sent a
/// notification.
async fn notifier_backend(db: &TestDb, app: &str) -> i32 {
    let watch = Stopwatch::start();
    loop {
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity \
              WHERE application_name = $1 AND query = 'SELECT pg_notify($1, $2)'",
        )
        .bind(app)
        .fetch_optional(&db.admin)
        .await
        .unwrap();
        if let Some(pid) = pid {
            return pid;
        }
        assert!(watch.elapsed() < DEADLINE, "no notifier backend appeared");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The notifier task (behind `PostgresStore::notify`, and the retries of failed after-commit
/// notifications) reconnects when its connection is cut: the next `notify()` still wakes
/// another process's listener, and never fails for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notifier_recovers_from_a_cut_connection() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let listening = db
            .ready_store(db.pool(&db.app("listen3"), 2).await, clock.clone())
            .await;
        let app = db.app("writer3");
        let config = PostgresConfig {
            notify_in_transaction: false,
            ..PostgresConfig::new(db.schema.clone())
        };
        let writer =
            PostgresStore::new(db.pool(&app, 2).await, config, clock, Arc::new(OsEntropy)).unwrap();
        let mut listener = listening
            .wake_listener()
            .expect("postgres has a wake listener");
        assert!(woken(&mut listener).await, "no wake-up after connecting");
        drain(&mut listener).await;

        let mut tx = writer.pool().begin().await.unwrap();
        writer.enqueue_in(&mut tx, order(1)).await.unwrap();
        tx.commit().await.unwrap();
        writer.notify();
        assert!(
            woken(&mut listener).await,
            "the first notify() did not wake"
        );
        let pid = notifier_backend(&db, &app).await;
        let cut: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&db.admin)
            .await
            .unwrap();
        assert!(cut);
        drain(&mut listener).await;

        let mut tx = writer.pool().begin().await.unwrap();
        writer.enqueue_in(&mut tx, order(2)).await.unwrap();
        tx.commit().await.unwrap();
        writer.notify();
        assert!(
            woken(&mut listener).await,
            "a notify() after the notifier's connection was cut did not wake"
        );
        assert_eq!(listening.stats().await.unwrap().pending, 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_after_commit_wakes_when_not_notifying_in_the_transaction() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let app = db.app("listen2");
        let listening = db.ready_store(db.pool(&app, 2).await, clock.clone()).await;
        let config = PostgresConfig {
            notify_in_transaction: false,
            ..PostgresConfig::new(db.schema.clone())
        };
        let writer = PostgresStore::new(
            db.pool(&db.app("writer2"), 2).await,
            config,
            clock,
            Arc::new(OsEntropy),
        )
        .unwrap();
        let mut listener = listening
            .wake_listener()
            .expect("postgres has a wake listener");
        assert!(woken(&mut listener).await, "no wake-up after connecting");
        listening_backend(&db, &app, None).await;
        drain(&mut listener).await;

        let mut tx = writer.pool().begin().await.unwrap();
        writer.enqueue_in(&mut tx, order(1)).await.unwrap();
        tx.commit().await.unwrap();
        writer.notify();
        assert!(
            woken(&mut listener).await,
            "notify() after the commit did not wake"
        );
        assert_eq!(listening.stats().await.unwrap().pending, 1);
    })
    .await;
}

/// A dispatcher that polls only every 30 s handles a message enqueued from another pool
/// well before that poll: LISTEN/NOTIFY wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_dispatcher_is_woken_by_an_enqueue_long_before_its_poll() {
    with_db(|db| async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let store = db
            .ready_store(db.pool(&db.app("dispatcher"), 4).await, clock.clone())
            .await;
        let writer = db.store(db.pool(&db.app("writer"), 2).await, clock.clone());
        let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let dispatcher = outboxkit_dispatch::Dispatcher::builder(Arc::new(store.clone()))
            .clock(Arc::new(SystemClock))
            .config(outboxkit_dispatch::DispatcherConfig {
                poll_interval: std::time::Duration::from_secs(30),
                ..outboxkit_dispatch::DispatcherConfig::default()
            })
            .handler(
                "worker",
                "*",
                move |_c: outboxkit_dispatch::Context, _m: outboxkit_core::Message| {
                    let seen = seen_tx.clone();
                    async move {
                        let _ = seen.send(());
                        outboxkit_dispatch::HandlerResult::Ok
                    }
                },
            )
            .build()
            .unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(async move {
            dispatcher
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
        });
        // Let it claim nothing and go idle, listening.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        writer.enqueue(order(1)).await.unwrap();
        let handled =
            tokio::time::timeout(std::time::Duration::from_secs(10), seen_rx.recv()).await;
        let _ = stop_tx.send(());
        let report = run.await.unwrap().unwrap();
        assert!(
            handled.is_ok(),
            "the handler did not run before the 30 s poll: {report}"
        );
        assert_eq!(report.succeeded, 1, "{report}");
    })
    .await;
}
