//! What the `endpoints` commands share: the endpoint id argument, the administration, and
//! the egress flags (`--allow-private`, `--allow-http`) with the hints they give.

use clap::Args;
use outboxkit_core::{EndpointId, EndpointUrl};
use outboxkit_dispatch::EndpointAdmin;

use crate::error::{CliError, CliResult};
use crate::store::{vault_from, Env};

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

pub(crate) fn endpoint_id(s: &str) -> CliResult<EndpointId> {
    Ok(EndpointId::parse(s)?)
}

/// An endpoint administration that refuses, before writing, any URL the relay's egress
/// policy with these flags would refuse (the scheme and every resolved address).
pub(crate) fn admin_for(env: &Env, egress: EgressArgs) -> CliResult<EndpointAdmin> {
    Ok(admin(env)?.with_url_policy(std::sync::Arc::new(egress_policy(egress))))
}

/// Add a hint to a refused URL when a flag would change the answer.
pub(crate) fn with_hint(
    e: outboxkit_core::Error,
    url: &EndpointUrl,
    egress: EgressArgs,
) -> CliError {
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

/// What to say when the egress policy refused an endpoint: the flag that would allow it
/// (none for addresses no flag allows, such as cloud metadata).
pub fn egress_hint(
    class: outboxkit_core::ErrorClass,
    url: &EndpointUrl,
    egress: EgressArgs,
) -> Option<String> {
    if class != outboxkit_core::ErrorClass::EgressRefused {
        return None;
    }
    if url.scheme() == "http" && !egress.allow_http {
        Some("the egress policy refuses plain http: --allow-http allows it".to_owned())
    } else if !egress.allow_private {
        Some(
            "the egress policy refuses private, loopback and link-local addresses: --allow-private allows them (metadata addresses stay refused)"
                .to_owned(),
        )
    } else {
        None
    }
}

/// The egress policy the flags describe.
pub fn egress_policy(egress: EgressArgs) -> outboxkit_http::EgressPolicy {
    outboxkit_http::EgressPolicy::default()
        .allow_http(egress.allow_http)
        .allow_private(egress.allow_private)
}

pub(crate) fn admin(env: &Env) -> CliResult<EndpointAdmin> {
    Ok(EndpointAdmin::new(
        env.store.clone(),
        vault_from(env)?,
        env.clock.clone(),
        env.entropy.clone(),
    ))
}
