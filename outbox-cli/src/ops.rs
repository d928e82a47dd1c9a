//! `outbox enqueue | replay | release-held | retry`.

use clap::Args;
use outboxkit_core::{DeliveryId, EndpointId, NewMessage, Operator};

use crate::error::{CliError, CliResult};
use crate::store::StoreArgs;

/// `enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The topic (lowercase dotted, e.g. order.created).
    #[arg(long)]
    topic: String,
    /// The payload, as JSON.
    #[arg(long)]
    data: String,
    /// An idempotency key: a second enqueue with the same tenant, topic and key does nothing.
    #[arg(long)]
    key: Option<String>,
    /// An ordering key: deliveries with the same key are delivered in order.
    #[arg(long)]
    ordering_key: Option<String>,
    /// Also send an e-mail to this recipient (repeatable).
    #[arg(long)]
    email: Vec<String>,
}

/// One delivery by id.
#[derive(Debug, Args)]
pub struct DeliveryArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The delivery id.
    id: String,
}

/// `release-held`.
#[derive(Debug, Args)]
pub struct ReleaseHeldArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint whose held deliveries are released.
    #[arg(long)]
    endpoint: String,
}

/// `enqueue`.
pub async fn enqueue(a: EnqueueArgs) -> CliResult<()> {
    let data: serde_json::Value = serde_json::from_str(&a.data)
        .map_err(|e| CliError::usage(format!("invalid input: data: not JSON ({e})")))?;
    let mut m = NewMessage::new(a.topic, data).tenant(a.store.tenant_name());
    if let Some(k) = a.key {
        m = m.idempotency_key(k);
    }
    if let Some(k) = a.ordering_key {
        m = m.ordering_key(k);
    }
    for e in a.email {
        m = m.email(e);
    }
    // Validate before opening the store, so bad input is exit 2 even when the store is
    // unreachable; the store validates again (with its own limits) before writing.
    m.clone().validate(
        &outboxkit_core::Limits::default(),
        outboxkit_core::Clock::now(&outboxkit_core::SystemClock),
    )?;
    let env = a.store.open().await?;
    let r = env.store.enqueue(m).await?;
    if r.duplicate {
        println!("duplicate of message {} (nothing written)", r.message_id);
    } else {
        println!(
            "enqueued message {} with {} deliveries",
            r.message_id, r.deliveries
        );
    }
    Ok(())
}

/// `replay`.
pub async fn replay(a: DeliveryArgs) -> CliResult<()> {
    let id = DeliveryId::parse(&a.id)?;
    let env = a.store.open().await?;
    Operator::new(env.store.clone(), env.clock.clone())
        .replay(&env.tenant, id)
        .await?;
    println!("replayed delivery {id}: due now with a fresh budget");
    Ok(())
}

/// `retry`.
pub async fn retry(a: DeliveryArgs) -> CliResult<()> {
    let id = DeliveryId::parse(&a.id)?;
    let env = a.store.open().await?;
    Operator::new(env.store.clone(), env.clock.clone())
        .retry_now(&env.tenant, id)
        .await?;
    println!("delivery {id} is due now");
    Ok(())
}

/// `release-held`.
pub async fn release_held(a: ReleaseHeldArgs) -> CliResult<()> {
    let id = EndpointId::parse(&a.endpoint)?;
    let env = a.store.open().await?;
    let n = Operator::new(env.store.clone(), env.clock.clone())
        .release_held(&env.tenant, id)
        .await?;
    println!("released {n} held deliveries");
    Ok(())
}
