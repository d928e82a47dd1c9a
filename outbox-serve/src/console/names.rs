//! Endpoints by name and URL instead of id: the description (when there is one) and the URL
//! without query string or userinfo, as `outbox endpoints list` shows them.

use std::collections::HashMap;

use outboxkit_core::{Destination, Endpoint, EndpointId, TenantId};

use crate::html::{enc, esc};
use crate::state::Serve;
use crate::views::display_url;

/// The tenant's endpoints, by id.
pub(crate) struct Names(HashMap<EndpointId, (String, String)>);

impl Names {
    /// Read the tenant's endpoints (none when they cannot be read: ids are shown then).
    pub(crate) async fn load(s: &Serve, tenant: &TenantId) -> Names {
        let eps = s
            .inner
            .store
            .list_endpoints(tenant)
            .await
            .unwrap_or_default();
        Names::of(&eps)
    }

    pub(crate) fn of(eps: &[Endpoint]) -> Names {
        Names(
            eps.iter()
                .map(|e| (e.id, (e.description.clone(), display_url(&e.url))))
                .collect(),
        )
    }

    /// An endpoint as HTML: its name and URL, linked to its page; the id on hover.
    pub(crate) fn endpoint(&self, id: EndpointId, tenant: &TenantId) -> String {
        let sid = id.to_string();
        let link = format!(
            "/console/endpoints/{}?tenant={}",
            enc(&sid),
            enc(tenant.as_str())
        );
        match self.0.get(&id) {
            Some((name, url)) => format!(
                "<a class=\"endpoint\" href=\"{}\" title=\"{}\">{}<span class=\"mono url\">{}</span></a>",
                esc(&link),
                esc(&sid),
                if name.is_empty() {
                    String::new()
                } else {
                    format!("<span class=\"name\">{}</span> ", esc(name))
                },
                esc(url)
            ),
            // Deleted since: only its id is left.
            None => format!("<span class=\"mono\" title=\"deleted endpoint\">{}</span>", esc(&sid)),
        }
    }

    /// A delivery's destination as HTML (an e-mail recipient is never shown).
    pub(crate) fn destination(&self, d: &Destination, tenant: &TenantId) -> String {
        match d {
            Destination::Webhook(id) => self.endpoint(*id, tenant),
            Destination::Handler(name) => {
                format!("handler <span class=\"mono\">{}</span>", esc(name.as_str()))
            }
            Destination::Email(_) => "e-mail".to_owned(),
        }
    }
}
