//! A desktop- or CLI-style application on an embedded SQLite file: it saves a note and its
//! `note.saved` event in one transaction, then drains what is due with `run_once` (as a
//! command run from cron, or at the end of a user action, would) and exits.
//!
//! ```sh
//! cargo run -p outboxkit-examples --example sqlite_notes            # a temporary file
//! cargo run -p outboxkit-examples --example sqlite_notes -- notes.db "buy milk"
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{DynStore, Message, NewMessage};
use outboxkit_dispatch::{Context, Dispatcher, HandlerResult};
use outboxkit_sqlite::{rusqlite, SqliteStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let scratch = tempfile::tempdir()?;
    let path = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| scratch.path().join("notes.db"));
    let text = args.next().unwrap_or_else(|| "remember the outbox".into());

    // Creates the file (or migrates an existing one); the outbox's tables are prefixed
    // `outbox_`, so they share the application's own file.
    let store = SqliteStore::open_path(&path).await?;
    let dyn_store: Arc<DynStore> = Arc::new(store.clone());

    let indexed = Arc::new(AtomicUsize::new(0));
    let counter = indexed.clone();
    let dispatcher = Dispatcher::builder(dyn_store)
        .handler(
            "search-index",
            "note.*",
            move |_ctx: Context, msg: Message| {
                let counter = counter.clone();
                async move {
                    let note: serde_json::Value = match serde_json::from_slice(&msg.payload) {
                        Ok(v) => v,
                        Err(e) => return HandlerResult::discard(format!("not a note: {e}")),
                    };
                    println!("indexing note {}", note["id"]);
                    counter.fetch_add(1, Ordering::SeqCst);
                    HandlerResult::Ok
                }
            },
        )
        .build()?;
    dispatcher.register().await?; // fan-out sees the handler from now on

    // The application's own write and its event, in one SQLite transaction.
    let mut conn = rusqlite::Connection::open(&path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute(
        "CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)",
        [],
    )?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute("INSERT INTO notes (text) VALUES (?1)", [&text])?;
    let id = tx.last_insert_rowid();
    store.enqueue_in(
        &tx,
        NewMessage::new("note.saved", serde_json::json!({ "id": id, "text": text })),
    )?;
    tx.commit()?;
    store.notify(); // wake dispatchers in this process now that the commit is visible

    let report = dispatcher.run_once(Duration::from_secs(60)).await?; // starts what fits the budget
    println!(
        "note {id} saved; {} delivered, {} dead",
        report.succeeded, report.dead
    );
    if indexed.load(Ordering::SeqCst) != 1 || report.succeeded != 1 {
        return Err("the note's event was not delivered exactly once".into());
    }
    Ok(())
}
