//! Endpoint administration on top of the store traits: create, change and rotate the
//! secrets of webhook endpoints, checking every input before anything is written.

use std::sync::Arc;

use crate::catalogue::{Catalogue, CatalogueMode};
use crate::endpoint::{
    check_description, check_headers, check_rate_limit, BodyFormat, CustomHeader, Endpoint,
    EndpointStatus, EndpointUpdate, EndpointUrl, HeaderInput, HeaderValue, HttpsOnly, UrlPolicy,
};
use crate::endpoint_headers::check_inputs;
use crate::error::{Error, Result};
use crate::ids::{EndpointId, TenantId, TopicFilter, TopicPattern};
use crate::signing::{HeaderNames, WebhookSecret};
use crate::store::DynStore;
use crate::time::{DynClock, DynEntropy};
use crate::vault::{DynSecretVault, SecretContext};
use crate::webhook_request::open_secrets;

/// A new webhook endpoint, as an operator describes it.
#[derive(Clone, Debug, Default)]
pub struct NewEndpoint {
    /// Where deliveries go.
    pub url: String,
    /// Free text.
    pub description: String,
    /// `*` or a comma-separated list of topics and `prefix.*` patterns (empty means `*`).
    pub filter: String,
    /// The body format.
    pub body_format: BodyFormat,
    /// Deliveries per second, if limited.
    pub rate_limit: Option<u32>,
    /// Strict FIFO: deliveries one at a time in enqueue order ([`Endpoint::fifo`]).
    pub fifo: bool,
    /// A `whsec_…` secret to use; `None` generates one.
    pub secret: Option<String>,
    /// Custom headers sent with every request (the secret ones are sealed).
    pub headers: Vec<HeaderInput>,
}

/// Creates and changes endpoints, sealing their secrets. Every input is checked before
/// anything is written.
#[derive(Clone, Debug)]
pub struct EndpointAdmin {
    store: Arc<DynStore>,
    vault: Arc<DynSecretVault>,
    clock: Arc<DynClock>,
    entropy: Arc<DynEntropy>,
    urls: Arc<dyn UrlPolicy>,
    names: HeaderNames,
}

impl EndpointAdmin {
    /// Administration over `store`, sealing secrets with `vault`. URLs must be `https`
    /// ([`HttpsOnly`]); see [`EndpointAdmin::with_url_policy`].
    pub fn new(
        store: Arc<DynStore>,
        vault: Arc<DynSecretVault>,
        clock: Arc<DynClock>,
        entropy: Arc<DynEntropy>,
    ) -> Self {
        EndpointAdmin {
            store,
            vault,
            clock,
            entropy,
            urls: Arc::new(HttpsOnly),
            names: HeaderNames::default(),
        }
    }

    /// Refuse custom headers named like the signature headers under the dispatcher's
    /// header prefix too (`webhook-*` is always refused).
    pub fn with_header_names(mut self, names: HeaderNames) -> Self {
        self.names = names;
        self
    }

    /// Check `inputs` and seal the secret values for endpoint `id` of `tenant`: the
    /// headers as stored. Nothing is written.
    pub async fn seal_headers(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        inputs: &[HeaderInput],
    ) -> Result<Vec<CustomHeader>> {
        let names = check_inputs(inputs, &self.names)?;
        let mut out = Vec::with_capacity(inputs.len());
        for (input, name) in inputs.iter().zip(names) {
            let value = if input.secret {
                let ctx = SecretContext::endpoint_header(tenant, id, &name);
                HeaderValue::Secret(self.vault.seal(input.value.as_bytes(), &ctx).await?)
            } else {
                HeaderValue::Plain(input.value.clone())
            };
            out.push(CustomHeader { name, value });
        }
        Ok(out)
    }

    /// Check new and changed URLs with `policy` (e.g. `outboxkit_http::EgressPolicy`, which also
    /// refuses private and metadata addresses; [`AnyUrl`](crate::endpoint::AnyUrl) for loopback
    /// receivers in tests).
    pub fn with_url_policy(mut self, policy: Arc<dyn UrlPolicy>) -> Self {
        self.urls = policy;
        self
    }

    fn secret(&self, given: Option<&str>) -> Result<WebhookSecret> {
        match given {
            Some(s) => WebhookSecret::parse(s),
            None => Ok(WebhookSecret::generate(&*self.entropy)),
        }
    }

    /// Create an endpoint; returns it and its secret (show the secret once).
    ///
    /// # Cancel safety
    /// The endpoint is written by one store call, last: dropping the future earlier writes
    /// nothing; the secret is lost with the future, so create again.
    pub async fn create(
        &self,
        tenant: &TenantId,
        new: NewEndpoint,
    ) -> Result<(Endpoint, WebhookSecret)> {
        let url = EndpointUrl::parse(&new.url)?;
        check_description(&new.description)?;
        let filter = if new.filter.trim().is_empty() {
            TopicFilter::all()
        } else {
            TopicFilter::parse(&new.filter)?
        };
        check_rate_limit(new.rate_limit)?;
        check_inputs(&new.headers, &self.names)?;
        self.check_filter(&filter).await?;
        let secret = self.secret(new.secret.as_deref())?;
        // Last, as it may resolve the host: every other field is checked first.
        self.urls.check(&url).await?;
        let now = self.clock.now();
        let id = EndpointId::generate(now, &*self.entropy);
        let sealed = self
            .vault
            .seal(secret.key(), &SecretContext::endpoint(tenant, id))
            .await?;
        let headers = self.seal_headers(tenant, id, &new.headers).await?;
        let endpoint = Endpoint {
            id,
            tenant: tenant.clone(),
            url,
            description: new.description,
            filter,
            status: EndpointStatus::Active,
            secret: sealed,
            previous_secret: None,
            headers,
            body_format: new.body_format,
            rate_limit: new.rate_limit,
            fifo: new.fifo,
            last_delivery: None,
            created_at: now,
            updated_at: now,
        };
        self.store.create_endpoint(&endpoint).await?;
        Ok((endpoint, secret))
    }

    /// A filter against the event-type catalogue: when its mode is not `off`, every exact
    /// topic must be registered and every `prefix.*` must match a registered one
    /// ([`crate::catalogue::Catalogue::check_filter`]).
    async fn check_filter(&self, filter: &TopicFilter) -> Result<()> {
        if filter
            .patterns()
            .iter()
            .all(|p| matches!(p, TopicPattern::All))
        {
            return Ok(());
        }
        let mode = self.store.catalogue_mode().await?;
        if mode == CatalogueMode::Off {
            return Ok(());
        }
        let types = self.store.list_event_types().await?;
        Catalogue::new(CatalogueMode::RefuseUnknown, types)?.check_filter(filter)
    }

    /// Rotate the secret (to `given`, or a new one): the old one keeps signing as the
    /// previous secret until [`EndpointAdmin::drop_previous_secret`]. Releases held
    /// deliveries of an active endpoint; a paused or disabled one's keep waiting.
    ///
    /// # Cancel safety
    /// One write, last: dropped before it, nothing changes; dropped during it, the rotation
    /// is made or not, and a secret that was made but not returned is unknown to the caller
    /// (rotate again: the unknown one becomes the previous secret, then drop it).
    pub async fn rotate_secret(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        given: Option<&str>,
    ) -> Result<WebhookSecret> {
        let secret = self.secret(given)?;
        self.store.get_endpoint(tenant, id).await?;
        let sealed = self
            .vault
            .seal(secret.key(), &SecretContext::endpoint(tenant, id))
            .await?;
        let update = EndpointUpdate {
            rotate_secret: Some(sealed),
            ..EndpointUpdate::default()
        };
        self.store.update_endpoint(tenant, id, &update).await?;
        Ok(secret)
    }

    /// End a rotation: only the current secret signs.
    ///
    /// # Cancel safety
    /// One store write: dropping the future leaves the change made or not made, never half.
    pub async fn drop_previous_secret(
        &self,
        tenant: &TenantId,
        id: EndpointId,
    ) -> Result<Endpoint> {
        let update = EndpointUpdate {
            drop_previous_secret: true,
            ..EndpointUpdate::default()
        };
        self.store.update_endpoint(tenant, id, &update).await
    }

    /// Apply a change (URL, filter, status, headers, …). A change to the custom headers is
    /// checked against the endpoint as it is: removing a header it does not have, or
    /// ending with more than the most headers, is refused before anything is written.
    ///
    /// # Cancel safety
    /// One store write: dropping the future leaves the change made or not made, never half.
    pub async fn update(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        update: EndpointUpdate,
    ) -> Result<Endpoint> {
        update.validate()?;
        if let Some(filter) = &update.filter {
            self.check_filter(filter).await?;
        }
        for h in update.headers.iter().flatten().chain(&update.set_headers) {
            crate::endpoint_headers::check_header_name(&h.name, &self.names)?;
        }
        if update.headers.is_some()
            || !update.set_headers.is_empty()
            || !update.remove_headers.is_empty()
        {
            let mut after = self.store.get_endpoint(tenant, id).await?;
            let base = update.headers.as_ref().unwrap_or(&after.headers);
            if let Some(r) = update
                .remove_headers
                .iter()
                .find(|r| !base.iter().any(|h| h.name.eq_ignore_ascii_case(r)))
            {
                return Err(Error::invalid_input(
                    "headers",
                    format!(
                        "the endpoint has no header `{}` to remove",
                        r.to_ascii_lowercase()
                    ),
                ));
            }
            let at = after.updated_at;
            update.apply(&mut after, at);
            check_headers(&after.headers)?;
        }
        if let Some(url) = &update.url {
            self.urls.check(url).await?;
        }
        self.store.update_endpoint(tenant, id, &update).await
    }

    /// Pause, resume or disable.
    ///
    /// # Cancel safety
    /// One store write: dropping the future leaves the change made or not made, never half.
    pub async fn set_status(
        &self,
        tenant: &TenantId,
        id: EndpointId,
        status: EndpointStatus,
    ) -> Result<Endpoint> {
        self.update(
            tenant,
            id,
            EndpointUpdate {
                status: Some(status),
                ..EndpointUpdate::default()
            },
        )
        .await
    }

    /// The endpoint's open secrets (current first).
    pub async fn secrets(&self, tenant: &TenantId, id: EndpointId) -> Result<Vec<WebhookSecret>> {
        let e = self.store.get_endpoint(tenant, id).await?;
        open_secrets(&*self.vault, &e).await
    }
}
