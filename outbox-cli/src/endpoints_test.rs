//! `outbox endpoints test`: send one signed test event, with the endpoint's custom headers,
//! to the endpoint now and print the answer.

use std::sync::Arc;

use outboxkit_core::{
    Clock, DisabledReason, EndpointStatus, HeaderNames, Message, MessageId, TenantId, Topic,
    WebhookResponse, WebhookTransport,
};
use outboxkit_dispatch::{open_headers, signed_request, with_custom_headers};

use clap::Args;

use crate::endpoints_common::{admin, egress_hint, egress_policy, endpoint_id, EgressArgs};
use crate::error::{CliError, CliResult};
use crate::outln;
use crate::store::vault_from;
use crate::store::{StoreArgs, VaultArgs};
use crate::util::emit_json;

/// `endpoints test`.
#[derive(Debug, Args)]
#[command(
    after_help = "Example:\n  outbox endpoints test --store sqlite:./outbox.sqlite 0193a0c4-… --allow-http --allow-private"
)]
pub struct TestArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) vault: VaultArgs,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// The endpoint id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) egress: EgressArgs,
}

/// Run `endpoints test`.
pub async fn test_endpoint(a: TestArgs) -> CliResult<()> {
    let id = endpoint_id(&a.id)?;
    let env = a.store.open_with(&a.vault).await?;
    let e = env.store.get_endpoint(&env.tenant, id).await?;
    if let EndpointStatus::Disabled(DisabledReason::Gone) = e.status {
        eprintln!("note: the endpoint is disabled (it answered 410 Gone)");
    }
    let secrets = admin(&env)?.secrets(&env.tenant, id).await?;
    let headers = open_headers(&*vault_from(&env)?, &e).await?;
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
    let req = with_custom_headers(req, &headers);
    let transport = outboxkit_http::HttpTransport::new(egress_policy(a.egress))?;
    let response = Arc::new(transport).send(req).await;
    if a.json {
        let v = match &response {
            WebhookResponse::Answered {
                status, excerpt, ..
            } => serde_json::json!({
                "id": id.to_string(),
                "answered": true,
                "status_code": status,
                "excerpt": excerpt,
            }),
            WebhookResponse::Failed { class, detail } => serde_json::json!({
                "id": id.to_string(),
                "answered": false,
                "error_class": class.as_str(),
                "detail": detail,
                "hint": egress_hint(*class, &e.url, a.egress),
            }),
        };
        emit_json(&v)?;
    }
    match response {
        WebhookResponse::Answered {
            status, excerpt, ..
        } => {
            if !a.json {
                outln!("answered {status}");
                if !excerpt.is_empty() {
                    outln!("{excerpt}");
                }
            }
            if (200..300).contains(&status) {
                Ok(())
            } else {
                Err(CliError::failed(format!("the endpoint answered {status}")))
            }
        }
        WebhookResponse::Failed { class, detail } => {
            let hint =
                egress_hint(class, &e.url, a.egress).map_or(String::new(), |h| format!(" ({h})"));
            Err(CliError::failed(format!(
                "no answer ({class}): {detail}{hint}"
            )))
        }
    }
}
