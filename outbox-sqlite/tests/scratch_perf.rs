use std::sync::Arc;
use std::time::Duration;
use outbox_core::*;
use outbox_sqlite::*;
use outbox_testing::ManualClock;

#[tokio::test(flavor = "multi_thread")]
async fn perf() {
    const N: usize = 50_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let clock = ManualClock::new();
    let store = SqliteStore::open(SqliteConfig::new(&path), clock.clone(), Arc::new(OsEntropy)).await.unwrap();
    store.put_consumer(&Consumer { name: ConsumerName::new("w").unwrap(), filter: TopicFilter::all(), created_at: clock.now() }).await.unwrap();
    let sw = Stopwatch::start();
    for chunk in 0..(N / 5000) {
        let msgs = (0..5000).map(|i| NewMessage::new("a.b", serde_json::json!(chunk * 5000 + i))).collect();
        store.enqueue_batch(msgs).await.unwrap();
    }
    eprintln!("enqueue {N}: {:?} ({:.0}/s)", sw.elapsed(), N as f64 / sw.elapsed().as_secs_f64());
    let sw = Stopwatch::start();
    let req = ClaimRequest::new(500, Duration::from_secs(60)).handler(ConsumerName::new("w").unwrap(), 10);
    let mut n = 0;
    let mut claim_t = Duration::ZERO; let mut comp_t = Duration::ZERO;
    loop {
        let s = Stopwatch::start();
        let b = store.claim(&req).await.unwrap();
        claim_t += s.elapsed();
        if b.is_empty() { break; }
        n += b.len();
        let items: Vec<_> = b.iter().map(|c| (c.lease.clone(), Completion { verdict: Verdict::Succeeded, attempt: Some(AttemptRecord { started_at: clock.now(), finished_at: clock.now(), outcome: AttemptOutcome::Succeeded, status_code: None, excerpt: None }) })).collect();
        let s = Stopwatch::start();
        store.complete_many(&items).await.unwrap();
        comp_t += s.elapsed();
    }
    eprintln!("dispatch {n}: {:?} ({:.0}/s) claim {:?} complete {:?}", sw.elapsed(), n as f64 / sw.elapsed().as_secs_f64(), claim_t, comp_t);

    // raw baseline
    let conn = rusqlite::Connection::open(dir.path().join("raw.db")).unwrap();
    conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE q (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, status TEXT NOT NULL, due INTEGER NOT NULL, token TEXT, payload BLOB); CREATE INDEX q_due ON q(due, seq) WHERE status = 'pending';").unwrap();
    {
        let tx = conn.unchecked_transaction().unwrap();
        let mut st = tx.prepare("INSERT INTO q (id, status, due, payload) VALUES (?1, 'pending', 0, ?2)").unwrap();
        for i in 0..N { st.execute(rusqlite::params![format!("{:036}", i), format!("{i}")]).unwrap(); }
        drop(st); tx.commit().unwrap();
    }
    let sw = Stopwatch::start();
    let mut n = 0;
    loop {
        let tx = conn.unchecked_transaction().unwrap();
        let ids: Vec<String> = {
            let mut st = tx.prepare_cached("UPDATE q SET status='processing', token='t', due=1 WHERE seq IN (SELECT seq FROM q WHERE status='pending' AND due <= 0 ORDER BY due, seq LIMIT 500) RETURNING id, payload").unwrap();
            st.query_map([], |r| r.get(0)).unwrap().collect::<Result<_,_>>().unwrap()
        };
        tx.commit().unwrap();
        if ids.is_empty() { break; }
        n += ids.len();
        let tx = conn.unchecked_transaction().unwrap();
        { let mut st = tx.prepare_cached("UPDATE q SET status='done', token=NULL WHERE id=?1 AND token='t'").unwrap();
          for id in &ids { st.execute([id]).unwrap(); } }
        tx.commit().unwrap();
    }
    eprintln!("raw {n}: {:?} ({:.0}/s)", sw.elapsed(), n as f64 / sw.elapsed().as_secs_f64());
}
