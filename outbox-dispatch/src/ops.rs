//! Operator calls and endpoint administration on top of the store traits.

use std::sync::Arc;
use std::time::Duration;

use outboxkit_core::endpoint::{
    check_description, BodyFormat, Endpoint, EndpointStatus, EndpointUpdate, EndpointUrl,
    HttpsOnly, UrlPolicy,
};
use outboxkit_core::error::Result;
use outboxkit_core::ids::{DeliveryId, EndpointId, TenantId, TopicFilter};
use outboxkit_core::signing::WebhookSecret;
use outboxkit_core::store::{DynStore, LedgerExt, PurgeReport, Stats};
use outboxkit_core::time::{DynClock, DynEntropy};
use outboxkit_core::vault::{DynSecretVault, SecretContext};

/// What an operator does: replay dead letters, release held deliveries, retry now, purge,
/// read statistics.
#[derive(Clone, Debug)]
pub struct Operator {
    store: Arc<DynStore>,
    clock: Arc<DynClock>,
}

impl Operator {
    /// Operator calls on `store`, with time from `clock`.
    pub fn new(store: Arc<DynStore>, clock: Arc<DynClock>) -> Self {
        Operator { store, clock }
    }

    /// Give a dead delivery a fresh budget, due now.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn replay(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.replay(tenant, delivery).await
    }

    /// Release an endpoint's held deliveries.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn release_held(&self, tenant: &TenantId, endpoint: EndpointId) -> Result<u64> {
        self.store.release_held(tenant, endpoint).await
    }

    /// Make a pending or held delivery due now.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn retry_now(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.retry_now(tenant, delivery).await
    }

    /// Reset a held delivery to a fresh budget, due now (attempts and snoozes 0). Any other
    /// status is a `Conflict`.
    ///
    /// # Cancel safety
    /// One store call: dropping the future leaves the change made or not made, never half.
    pub async fn reset(&self, tenant: &TenantId, delivery: DeliveryId) -> Result<()> {
        self.store.reset(tenant, delivery).await
    }

    /// Remove finished deliveries older than `older_than`, `batch` at a time, visiting
    /// tenants in rotation until nothing is left to purge.
    ///
    /// # Cancel safety
    /// Each batch is one store call; dropping the future stops between or within batches,
    /// leaving the batches already purged purged and the rest in place (call it again).
    pub async fn purge(&self, older_than: Duration, batch: u32) -> Result<PurgeReport> {
        outboxkit_core::store::check_purge_limit(batch)?;
        let before = self.clock.now().saturating_sub(older_than);
        let mut total = PurgeReport::default();
        for _ in 0..1_000_000 {
            let r = self.store.purge_completed(before, batch).await?;
            if r.tenant.is_none() || (r.deliveries == 0 && r.messages == 0) {
                break;
            }
            total.deliveries += r.deliveries;
            total.messages += r.messages;
            total.tenant = r.tenant;
        }
        Ok(total)
    }

    /// Queue statistics.
    pub async fn stats(&self) -> Result<Stats> {
        self.store.stats().await
    }
}

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
    /// A `whsec_…` secret to use; `None` generates one.
    pub secret: Option<String>,
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
        }
    }

    /// Check new and changed URLs with `policy` (e.g. `outboxkit_http::EgressPolicy`, which also
    /// refuses private and metadata addresses; [`outboxkit_core::endpoint::AnyUrl`] for loopback
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
        outboxkit_core::endpoint::check_rate_limit(new.rate_limit)?;
        let secret = self.secret(new.secret.as_deref())?;
        // Last, as it may resolve the host: every other field is checked first.
        self.urls.check(&url).await?;
        let now = self.clock.now();
        let id = EndpointId::generate(now, &*self.entropy);
        let sealed = self
            .vault
            .seal(secret.key(), &SecretContext::endpoint(tenant, id))
            .await?;
        let endpoint = Endpoint {
            id,
            tenant: tenant.clone(),
            url,
            description: new.description,
            filter,
            status: EndpointStatus::Active,
            secret: sealed,
            previous_secret: None,
            body_format: new.body_format,
            rate_limit: new.rate_limit,
            last_delivery: None,
            created_at: now,
            updated_at: now,
        };
        self.store.create_endpoint(&endpoint).await?;
        Ok((endpoint, secret))
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

    /// Apply a change (URL, filter, status, …).
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
        super::webhook::open_secrets(&*self.vault, &e).await
    }
}
