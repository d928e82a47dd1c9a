//! Rows for adapters' own tests: what an upgrade or layout test writes beside the
//! conformance suite.

use outboxkit_core::{
    Endpoint, EndpointId, EndpointStatus, EndpointUrl, OsEntropy, SealedSecret, TenantId,
    Timestamp, TopicFilter,
};

/// An active endpoint of `tenant` for every topic at `https://hooks.example.com/in`, created
/// at `now`, with a placeholder sealed secret (tests that sign open nothing with it).
pub fn sample_endpoint(tenant: &TenantId, now: Timestamp) -> Endpoint {
    Endpoint {
        id: EndpointId::generate(now, &OsEntropy),
        tenant: tenant.clone(),
        url: EndpointUrl::parse("https://hooks.example.com/in")
            .unwrap_or_else(|e| panic!("the sample URL parses: {e}")),
        description: String::new(),
        filter: TopicFilter::all(),
        status: EndpointStatus::Active,
        secret: SealedSecret(vec![1; 8]),
        previous_secret: None,
        headers: vec![],
        body_format: Default::default(),
        rate_limit: None,
        fifo: false,
        last_delivery: None,
        created_at: now,
        updated_at: now,
    }
}
