//! Enqueue inside a Redis `MULTI`: the application's own write and the outbox message are
//! executed atomically by `EXEC`, then a dispatcher delivers the message.
//!
//! ```sh
//! cargo run -p outboxkit-examples --example redis_multi   # REDIS_URL, default redis://127.0.0.1:6379
//! ```
//!
//! Every key lives under a prefix with a hash tag (`{example-<pid>}` here), so the whole
//! outbox is one Cluster slot; give your own keys in the same `MULTI` the same hash tag when
//! you run on Redis Cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::{DynStore, Message, NewMessage, OsEntropy, SystemClock};
use outboxkit_dispatch::{Context, Dispatcher, HandlerResult};
use outboxkit_redis::{redis, RedisConfig, RedisStore};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let tag = format!("example-{}", std::process::id());
    let config = RedisConfig {
        prefix: format!("{{{tag}}}"),
        ..RedisConfig::default()
    };
    let client = redis::Client::open(url.as_str())?;
    let store = RedisStore::new(client, config, Arc::new(SystemClock), Arc::new(OsEntropy)).await?;
    let dyn_store: Arc<DynStore> = Arc::new(store.clone());

    let shipped = Arc::new(AtomicUsize::new(0));
    let counter = shipped.clone();
    let dispatcher = Dispatcher::builder(dyn_store)
        .handler("ship", "cart.*", move |_ctx: Context, msg: Message| {
            let counter = counter.clone();
            async move {
                println!("shipping for {}", msg.topic);
                counter.fetch_add(1, Ordering::SeqCst);
                HandlerResult::Ok
            }
        })
        .build()?;
    dispatcher.register().await?;

    // Your own write and the message in one MULTI/EXEC.
    let cart_key = format!("{{{tag}}}:cart:7");
    let mut pipe = redis::pipe();
    pipe.atomic()
        .hset(&cart_key, "status", "checked-out")
        .ignore();
    store.enqueue_in(
        &mut pipe,
        NewMessage::new("cart.checked_out", serde_json::json!({ "cart": 7 })),
    )?;
    let mut conn = store.connection();
    let _: redis::Value = pipe.query_async(&mut conn).await?;

    let report = dispatcher.run_once(Duration::from_secs(60)).await?; // starts what fits the budget
    println!("{} delivered", report.succeeded);

    // Leave nothing behind on the shared server.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{tag}}}*"))
        .query_async(&mut conn)
        .await?;
    if !keys.is_empty() {
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await?;
    }
    if shipped.load(Ordering::SeqCst) != 1 || report.succeeded != 1 {
        return Err("the cart's event was not delivered exactly once".into());
    }
    Ok(())
}
