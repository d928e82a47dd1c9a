//! `outbox endpoints …`: add, list, show, update, pause, resume, rotate-secret, delete, test.

use clap::{Args, Subcommand};
use outboxkit_core::{BodyFormat, EndpointStatus, EndpointUpdate, EndpointUrl, TopicFilter};
use outboxkit_dispatch::NewEndpoint;

use crate::endpoint_headers::{header_names, header_text, HeaderArgs};
use crate::endpoints_common::{admin, admin_for, endpoint_id, with_hint};
pub use crate::endpoints_common::{egress_hint, egress_policy, EgressArgs};
use crate::endpoints_test::TestArgs;
use crate::endpoints_view::{
    circuit_detail, circuit_text, fifo_text, last_delivery_text, parse_rate_limit,
};
use crate::error::{CliError, CliResult};
use crate::json::display_url;
use crate::store::{StoreArgs, VaultArgs};
use crate::util::{emit_json, table};
use crate::{json, out, outln};

/// `outbox endpoints`.
#[derive(Debug, Subcommand)]
pub enum EndpointsCmd {
    /// Create an endpoint; prints its signing secret once.
    Add(AddArgs),
    /// List a tenant's endpoints (URLs without query string or userinfo unless --show-url).
    List(ListArgs),
    /// Show one endpoint (its URL without query string or userinfo unless --show-url).
    Show(ShowArgs),
    /// Change an endpoint's URL, description, filter, body format, rate limit or custom
    /// headers.
    Update(UpdateArgs),
    /// Pause an endpoint: what is queued and what is published meanwhile waits for it
    /// (held, not sent, no attempts spent) until it is resumed.
    Pause(StatusArgs),
    /// Resume a paused or disabled endpoint: its waiting deliveries go out at once, in order.
    Resume(StatusArgs),
    /// Rotate the signing secret (the old one keeps signing until --finish); releases held
    /// deliveries. Prints the new secret once. While a rotation is in progress, a new one
    /// needs --force (it drops the oldest secret).
    RotateSecret(RotateArgs),
    /// Delete an endpoint (its pending and waiting deliveries die as endpoint-removed).
    Delete(IdArgs),
    /// Send one signed test event to the endpoint now and print the answer.
    Test(TestArgs),
}

/// `endpoints add`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints add --store sqlite:./outbox.sqlite --url https://crm.example.com/hooks --filter 'order.*' --description crm"
)]
pub struct AddArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// Print one JSON document instead of text (it holds the secret, shown once).
    #[arg(long)]
    json: bool,
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
    /// At most this many deliveries per second to this endpoint (1-1000000; none by default).
    #[arg(long, value_name = "PER_SECOND")]
    rate_limit: Option<u32>,
    /// Strict FIFO: deliveries one at a time in enqueue order, across ordering keys.
    #[arg(long)]
    fifo: bool,
    #[command(flatten)]
    headers: HeaderArgs,
    #[command(flatten)]
    egress: EgressArgs,
}

/// `endpoints list`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints list --store sqlite:./outbox.sqlite --json | jq '.endpoints[].id'"
)]
pub struct ListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Show the whole URL, query string (where tokens live) and userinfo included.
    #[arg(long)]
    show_url: bool,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// `endpoints show`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints show --store sqlite:./outbox.sqlite 0193a0c4-… --show-url"
)]
pub struct ShowArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
    /// Show the whole URL, query string (where tokens live) and userinfo included.
    #[arg(long)]
    show_url: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// One endpoint by id.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints delete --store sqlite:./outbox.sqlite 0193a0c4-…"
)]
pub struct IdArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The endpoint id.
    id: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `endpoints pause|resume`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints pause --store sqlite:./outbox.sqlite 0193a0c4-…"
)]
pub struct StatusArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// The endpoint id.
    id: String,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
}

/// `endpoints update`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints update --store sqlite:./outbox.sqlite 0193a0c4-… --url https://crm.example.com/v2/hooks"
)]
pub struct UpdateArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// Print one JSON document instead of text.
    #[arg(long)]
    json: bool,
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
    /// A new rate limit in deliveries per second (1-1000000), or `none` to remove it.
    #[arg(long, value_name = "PER_SECOND|none")]
    rate_limit: Option<String>,
    /// Turn strict FIFO on, or off with --no-fifo (for deliveries enqueued from now on).
    #[arg(long, conflicts_with = "no_fifo")]
    fifo: bool,
    #[arg(long, hide_short_help = true)]
    no_fifo: bool,
    #[command(flatten)]
    headers: HeaderArgs,
    /// Stop sending this custom header (repeatable).
    #[arg(long = "remove-header", value_name = "NAME")]
    remove_header: Vec<String>,
    #[command(flatten)]
    egress: EgressArgs,
}

/// `endpoints rotate-secret`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  outbox endpoints rotate-secret --store sqlite:./outbox.sqlite 0193a0c4-…\n  outbox endpoints rotate-secret --store sqlite:./outbox.sqlite 0193a0c4-… --finish"
)]
pub struct RotateArgs {
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    vault: VaultArgs,
    /// Rotate even though a rotation is in progress: the oldest secret stops signing now,
    /// so receivers still verifying with it start failing.
    #[arg(long, conflicts_with = "finish")]
    force: bool,
    /// Print one JSON document instead of text (it holds a new secret, shown once).
    #[arg(long)]
    json: bool,
    /// The endpoint id.
    id: String,
    /// Use this `whsec_…` secret instead of generating one.
    #[arg(long)]
    secret: Option<String>,
    /// End a rotation: drop the previous secret instead.
    #[arg(long)]
    finish: bool,
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
            let headers = a.headers.inputs()?;
            let env = a.store.open_with(&a.vault).await?;
            let new = NewEndpoint {
                url: a.url,
                description: a.description,
                filter: a.filter,
                body_format: if a.raw {
                    BodyFormat::Raw
                } else {
                    BodyFormat::Envelope
                },
                rate_limit: a.rate_limit,
                fifo: a.fifo,
                secret: a.secret,
                headers,
            };
            let (e, secret) = admin_for(&env, a.egress)?
                .create(&env.tenant, new)
                .await
                .map_err(|e| with_hint(e, &url, a.egress))?;
            if a.json {
                let mut v = json::endpoint(&e, false);
                v["secret"] = serde_json::Value::String(secret.expose());
                return emit_json(&v);
            }
            outln!("created endpoint {}", e.id);
            outln!("signing secret (shown once): {}", secret.expose());
        }
        EndpointsCmd::List(a) => {
            let env = a.store.open().await?;
            let endpoints = env.store.list_endpoints(&env.tenant).await?;
            if a.json {
                return emit_json(&serde_json::json!({
                    "endpoints": endpoints.iter().map(|e| json::endpoint(e, a.show_url)).collect::<Vec<_>>(),
                }));
            }
            let rows: Vec<Vec<String>> = endpoints
                .into_iter()
                .map(|e| {
                    vec![
                        e.id.to_string(),
                        status_text(&e.status),
                        circuit_text(e.last_delivery.as_ref()).to_owned(),
                        e.filter.to_string(),
                        fifo_text(e.fifo).to_owned(),
                        display_url(&e.url, a.show_url),
                        last_delivery_text(e.last_delivery.as_ref()),
                        header_names(&e),
                        e.description,
                    ]
                })
                .collect();
            out!(
                "{}",
                table(
                    &[
                        "id",
                        "status",
                        "circuit at start",
                        "filter",
                        "order",
                        "url",
                        "last delivery",
                        "headers",
                        "description"
                    ],
                    &rows
                )
            );
        }
        EndpointsCmd::Show(a) => {
            let id = endpoint_id(&a.id)?;
            let env = a.store.open().await?;
            let e = env.store.get_endpoint(&env.tenant, id).await?;
            if a.json {
                return emit_json(&json::endpoint(&e, a.show_url));
            }
            outln!("id:           {}", e.id);
            outln!("tenant:       {}", e.tenant);
            outln!("url:          {}", display_url(&e.url, a.show_url));
            outln!("status:       {}", status_text(&e.status));
            outln!("filter:       {}", e.filter);
            outln!("body format:  {}", e.body_format.as_str());
            outln!(
                "rate limit:   {}",
                e.rate_limit
                    .map_or_else(|| "none".to_owned(), |r| format!("{r} per second"))
            );
            outln!("order:        {}", fifo_text(e.fifo));
            outln!("description:  {}", e.description);
            for (i, h) in e.headers.iter().enumerate() {
                let label = if i == 0 { "headers:" } else { "" };
                outln!("{label:<13} {}", header_text(&h.name, &h.value));
            }
            outln!(
                "last delivery: {}",
                last_delivery_text(e.last_delivery.as_ref())
            );
            outln!(
                "circuit at start: {}",
                circuit_detail(e.last_delivery.as_ref())
            );
            outln!(
                "rotation:     {}",
                if e.previous_secret.is_some() {
                    "in progress (two secrets sign)"
                } else {
                    "none"
                }
            );
            outln!("created:      {}", e.created_at);
            outln!("updated:      {}", e.updated_at);
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
            update.rate_limit = a.rate_limit.as_deref().map(parse_rate_limit).transpose()?;
            update.fifo = (a.fifo || a.no_fifo).then_some(a.fifo);
            let headers = a.headers.inputs()?;
            update.remove_headers = a.remove_header;
            update.validate()?;
            if let Some(r) = update
                .remove_headers
                .iter()
                .find(|r| headers.iter().any(|h| h.name.eq_ignore_ascii_case(r)))
            {
                return Err(CliError::usage(format!(
                    "invalid input: headers: header `{}` is both set and removed",
                    r.to_ascii_lowercase()
                )));
            }
            let env = a.store.open_with(&a.vault).await?;
            if !headers.is_empty() {
                update.set_headers = admin(&env)?.seal_headers(&env.tenant, id, &headers).await?;
            }
            let url = update.url.clone();
            let e = admin_for(&env, a.egress)?
                .update(&env.tenant, id, update)
                .await
                .map_err(|e| match &url {
                    Some(u) => with_hint(e, u, a.egress),
                    None => CliError::from(e),
                })?;
            if a.json {
                return emit_json(&json::endpoint(&e, false));
            }
            outln!("updated endpoint {}", e.id);
        }
        EndpointsCmd::Pause(a) => set_status(a, EndpointStatus::Paused).await?,
        EndpointsCmd::Resume(a) => set_status(a, EndpointStatus::Active).await?,
        EndpointsCmd::RotateSecret(a) => {
            let id = endpoint_id(&a.id)?;
            if let Some(s) = &a.secret {
                outboxkit_core::WebhookSecret::parse(s)?;
            }
            let env = a.store.open_with(&a.vault).await?;
            let admin = admin(&env)?;
            if a.finish {
                admin.drop_previous_secret(&env.tenant, id).await?;
                if a.json {
                    return emit_json(
                        &serde_json::json!({ "id": id.to_string(), "rotation_in_progress": false }),
                    );
                }
                outln!("rotation finished: only the current secret signs");
            } else {
                let e = env.store.get_endpoint(&env.tenant, id).await?;
                if e.previous_secret.is_some() && !a.force {
                    eprintln!("warning: a rotation is in progress: two secrets sign; rotating again drops the older one, and receivers still verifying with it start failing");
                    return Err(CliError::usage(format!(
                        "invalid input: rotation in progress: finish it with `outbox endpoints rotate-secret {id} --finish`, or rotate anyway with --force"
                    )));
                }
                let s = admin
                    .rotate_secret(&env.tenant, id, a.secret.as_deref())
                    .await?;
                if a.json {
                    return emit_json(&serde_json::json!({
                        "id": id.to_string(),
                        "secret": s.expose(),
                        "rotation_in_progress": true,
                    }));
                }
                outln!("new signing secret (shown once): {}", s.expose());
                outln!("both secrets sign until `outbox endpoints rotate-secret {id} --finish`");
            }
        }
        EndpointsCmd::Delete(a) => {
            let id = endpoint_id(&a.id)?;
            let env = a.store.open().await?;
            env.store.delete_endpoint(&env.tenant, id).await?;
            if a.json {
                return emit_json(&serde_json::json!({ "deleted": id.to_string() }));
            }
            outln!("deleted endpoint {id}");
        }
        EndpointsCmd::Test(a) => crate::endpoints_test::test_endpoint(a).await?,
    }
    Ok(())
}

async fn set_status(a: StatusArgs, status: EndpointStatus) -> CliResult<()> {
    let id = endpoint_id(&a.id)?;
    let env = a.store.open_with(&a.vault).await?;
    let action = match status {
        EndpointStatus::Paused => "endpoint.pause",
        EndpointStatus::Active => "endpoint.resume",
        _ => "endpoint.status",
    };
    let e = admin(&env)?.set_status(&env.tenant, id, status).await?;
    crate::audit::record(
        &env,
        Some(&env.tenant),
        action,
        &id.to_string(),
        "from the cli".to_owned(),
    )
    .await;
    if a.json {
        return emit_json(&json::endpoint(&e, false));
    }
    outln!("endpoint {} is {}", e.id, status_text(&e.status));
    Ok(())
}
