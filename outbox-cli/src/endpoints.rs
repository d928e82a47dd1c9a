//! `outbox endpoints …`: add, list, show, update, pause, resume, rotate-secret, delete, test.

use std::sync::Arc;

use clap::{Args, Subcommand};
use outboxkit_core::{
    dispatcher::signed_request, BodyFormat, Clock, DisabledReason, EndpointAdmin, EndpointId,
    EndpointStatus, EndpointUpdate, EndpointUrl, HeaderNames, Message, MessageId, NewEndpoint,
    TenantId, Topic, TopicFilter, WebhookResponse, WebhookTransport,
};

use crate::error::{CliError, CliResult};
use crate::store::{vault_from, Env, StoreArgs};
use crate::util::table;

/// `outbox endpoints`.
#[derive(Debug, Subcommand)]
pub enum EndpointsCmd {
    /// Create an endpoint; prints its signing secret once.
    Add(AddArgs),
    /// List a tenant's endpoints.
    List(StoreArgs),
    /// Show one endpoint.
    Show(IdArgs),
    /// Change an endpoint's URL, description, filter or body format.
    Update(UpdateArgs),
    /// Pause an endpoint: its deliveries wait without spending attempts.
    Pause(IdArgs),
    /// Resume a paused or disabled endpoint.
    Resume(IdArgs),
    /// Rotate the signing secret (the old one keeps signing until --finish); releases held
    /// deliveries. Prints the new secret once.
    RotateSecret(RotateArgs),
    /// Delete an endpoint (its pending deliveries die as endpoint-removed).
    Delete(IdArgs),
    /// Send one signed test event to the endpoint now and print the answer.
    Test(TestArgs),
}

/// Where an endpoint may point.
#[derive(Debug, Args, Clone, Copy)]
pub struct EgressArgs {
    /// Allow private, loopback and link-local addresses (internal receivers).
    #[arg(long)]
    pub allow_private: bool,
    /// Allow plain http:// URLs.
    #[arg(long)]
    pub allow_http: bool,
}

/// `endpoints add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The receiver's URL (https unless --allow-http).
    #[arg(long)]
    url: String,
    /// Free text for operators.
    #[arg(long, default_value = "")]
    description: String,
    /// Topics: `*`, or a comma-separated list of topics and `prefix.*` patterns.
    #[arg(long, default_value = "*")]
    filter: String,
    /// Use this `whsec_…` secret instead of generating one.
    #[arg(long)]
    secret: Option<String>,
    /// Send the payload as is instead of the {type, timestamp, data} envelope.
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    egress: EgressArgs,
}

/// One endpoint by id.
#[derive(Debug, Args)]
pub struct IdArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
}

/// `endpoints update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
    /// A new URL (releases held deliveries).
    #[arg(long)]
    url: Option<String>,
    /// A new description.
    #[arg(long)]
    description: Option<String>,
    /// A new filter.
    #[arg(long)]
    filter: Option<String>,
    /// `envelope` or `raw`.
    #[arg(long)]
    body_format: Option<String>,
    #[command(flatten)]
    egress: EgressArgs,
}

/// `endpoints rotate-secret`.
#[derive(Debug, Args)]
pub struct RotateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
    /// Use this `whsec_…` secret instead of generating one.
    #[arg(long)]
    secret: Option<String>,
    /// End a rotation: drop the previous secret instead.
    #[arg(long)]
    finish: bool,
}

/// `endpoints test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
    #[command(flatten)]
    egress: EgressArgs,
}

fn endpoint_id(s: &str) -> CliResult<EndpointId> {
    Ok(EndpointId::parse(s)?)
}

/// An endpoint administration that refuses, before writing, any URL the relay's egress
/// policy with these flags would refuse (the scheme and every resolved address).
fn admin_for(env: &Env, egress: EgressArgs) -> CliResult<EndpointAdmin> {
    Ok(admin(env)?.with_url_policy(std::sync::Arc::new(egress_policy(egress))))
}

/// Add a hint to a refused URL when a flag would change the answer.
fn with_hint(e: outboxkit_core::Error, url: &EndpointUrl, egress: EgressArgs) -> CliError {
    let mut err = CliError::from(e.clone());
    if e.field() == Some("url") && e.kind() == outboxkit_core::ErrorKind::InvalidInput {
        if url.scheme() == "http" && !egress.allow_http {
            err.message
                .push_str(" (use --allow-http for a plain http receiver)");
        } else if !egress.allow_private && !e.message().contains("metadata") {
            err.message
                .push_str(" (use --allow-private for an internal receiver)");
        }
    }
    err
}

/// The egress policy the flags describe.
pub fn egress_policy(egress: EgressArgs) -> outboxkit_http::EgressPolicy {
    outboxkit_http::EgressPolicy::default()
        .allow_http(egress.allow_http)
        .allow_private(egress.allow_private)
}

fn admin(env: &Env) -> CliResult<EndpointAdmin> {
    Ok(EndpointAdmin::new(
        env.store.clone(),
        vault_from(env)?,
        env.clock.clone(),
        env.entropy.clone(),
    ))
}

fn status_text(s: &EndpointStatus) -> String {
    match s {
        EndpointStatus::Disabled(r) => format!("disabled ({})", r.as_str()),
        other => other.as_str().to_owned(),
    }
}

/// Run an `endpoints` command.
pub async fn run(cmd: EndpointsCmd) -> CliResult<()> {
    match cmd {
        EndpointsCmd::Add(a) => {
            let url = EndpointUrl::parse(&a.url)?;
            let env = a.store.open().await?;
            let new = NewEndpoint {
                url: a.url,
                description: a.description,
                filter: a.filter,
                body_format: if a.raw {
                    BodyFormat::Raw
                } else {
                    BodyFormat::Envelope
                },
                rate_limit: None,
                secret: a.secret,
            };
            let (e, secret) = admin_for(&env, a.egress)?
                .create(&env.tenant, new)
                .await
                .map_err(|e| with_hint(e, &url, a.egress))?;
            println!("created endpoint {}", e.id);
            println!("signing secret (shown once): {}", secret.expose());
        }
        EndpointsCmd::List(s) => {
            let env = s.open().await?;
            let rows: Vec<Vec<String>> = env
                .store
                .list_endpoints(&env.tenant)
                .await?
                .into_iter()
                .map(|e| {
                    vec![
                        e.id.to_string(),
                        status_text(&e.status),
                        e.filter.to_string(),
                        e.url.to_string(),
                        last_delivery_text(e.last_delivery.as_ref()),
                        e.description,
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &[
                        "id",
                        "status",
                        "filter",
                        "url",
                        "last delivery",
                        "description"
                    ],
                    &rows
                )
            );
        }
        EndpointsCmd::Show(a) => {
            let env = a.store.open().await?;
            let e = env
                .store
                .get_endpoint(&env.tenant, endpoint_id(&a.id)?)
                .await?;
            println!("id:           {}", e.id);
            println!("tenant:       {}", e.tenant);
            println!("url:          {}", e.url);
            println!("status:       {}", status_text(&e.status));
            println!("filter:       {}", e.filter);
            println!("body format:  {}", e.body_format.as_str());
            println!("description:  {}", e.description);
            println!(
                "last delivery: {}",
                last_delivery_text(e.last_delivery.as_ref())
            );
            println!(
                "rotation:     {}",
                if e.previous_secret.is_some() {
                    "in progress (two secrets sign)"
                } else {
                    "none"
                }
            );
            println!("created:      {}", e.created_at);
            println!("updated:      {}", e.updated_at);
        }
        EndpointsCmd::Update(a) => {
            let id = endpoint_id(&a.id)?;
            let mut update = EndpointUpdate::default();
            if let Some(u) = &a.url {
                update.url = Some(EndpointUrl::parse(u)?);
            }
            update.description = a.description;
            update.filter = a.filter.as_deref().map(TopicFilter::parse).transpose()?;
            update.body_format = a
                .body_format
                .as_deref()
                .map(BodyFormat::parse)
                .transpose()?;
            update.validate()?;
            let env = a.store.open().await?;
            let url = update.url.clone();
            let e = admin_for(&env, a.egress)?
                .update(&env.tenant, id, update)
                .await
                .map_err(|e| match &url {
                    Some(u) => with_hint(e, u, a.egress),
                    None => CliError::from(e),
                })?;
            println!("updated endpoint {}", e.id);
        }
        EndpointsCmd::Pause(a) => set_status(a, EndpointStatus::Paused).await?,
        EndpointsCmd::Resume(a) => set_status(a, EndpointStatus::Active).await?,
        EndpointsCmd::RotateSecret(a) => {
            let id = endpoint_id(&a.id)?;
            if let Some(s) = &a.secret {
                outboxkit_core::WebhookSecret::parse(s)?;
            }
            let env = a.store.open().await?;
            let admin = admin(&env)?;
            if a.finish {
                admin.drop_previous_secret(&env.tenant, id).await?;
                println!("rotation finished: only the current secret signs");
            } else {
                let s = admin
                    .rotate_secret(&env.tenant, id, a.secret.as_deref())
                    .await?;
                println!("new signing secret (shown once): {}", s.expose());
                println!("both secrets sign until `outbox endpoints rotate-secret {id} --finish`");
            }
        }
        EndpointsCmd::Delete(a) => {
            let env = a.store.open().await?;
            env.store
                .delete_endpoint(&env.tenant, endpoint_id(&a.id)?)
                .await?;
            println!("deleted endpoint {}", a.id);
        }
        EndpointsCmd::Test(a) => test_endpoint(a).await?,
    }
    Ok(())
}

async fn set_status(a: IdArgs, status: EndpointStatus) -> CliResult<()> {
    let id = endpoint_id(&a.id)?;
    let env = a.store.open().await?;
    let e = admin(&env)?.set_status(&env.tenant, id, status).await?;
    println!("endpoint {} is {}", e.id, status_text(&e.status));
    Ok(())
}

async fn test_endpoint(a: TestArgs) -> CliResult<()> {
    let id = endpoint_id(&a.id)?;
    let env = a.store.open().await?;
    let e = env.store.get_endpoint(&env.tenant, id).await?;
    if let EndpointStatus::Disabled(DisabledReason::Gone) = e.status {
        eprintln!("note: the endpoint is disabled (it answered 410 Gone)");
    }
    let secrets = admin(&env)?.secrets(&env.tenant, id).await?;
    let now = env.clock.now();
    let message = Message {
        id: MessageId::generate(now, &*env.entropy),
        topic: Topic::new("outbox.test")?,
        payload: br#"{"test":true}"#.to_vec(),
        tenant: TenantId::clone(&env.tenant),
        ordering_key: None,
        idempotency_key: None,
        available_at: now,
        headers: Default::default(),
        cause: None,
        created_at: now,
    };
    let delivery = outboxkit_core::DeliveryId::generate(now, &*env.entropy);
    let req = signed_request(
        &e,
        &secrets,
        &message,
        delivery,
        now,
        &HeaderNames::default(),
        std::time::Duration::from_secs(10),
    );
    let transport = outboxkit_http::HttpTransport::new(egress_policy(a.egress))?;
    match Arc::new(transport).send(req).await {
        WebhookResponse::Answered {
            status, excerpt, ..
        } => {
            println!("answered {status}");
            if !excerpt.is_empty() {
                println!("{excerpt}");
            }
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(CliError::failed(format!("the endpoint answered {status}")))
            }
        }
        WebhookResponse::Failed { class, detail } => {
            Err(CliError::failed(format!("no answer ({class}): {detail}")))
        }
    }
}

/// An endpoint's last delivery: `succeeded 204 at 2026-…`, or `-` before the first one.
fn last_delivery_text(l: Option<&outboxkit_core::LastDelivery>) -> String {
    match l {
        None => "-".to_owned(),
        Some(l) => match l.status_code {
            Some(code) => format!("{} {code} at {}", l.outcome.as_str(), l.at),
            None => format!("{} at {}", l.outcome.as_str(), l.at),
        },
    }
}
