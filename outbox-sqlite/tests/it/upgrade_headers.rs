//! A file of schema version 9 (before endpoints had custom headers) upgrades in place to
//! version 10: its endpoints read back as they were, with no headers, and take headers after.

use outboxkit_core::{
    Clock, CustomHeader, Endpoint, EndpointId, EndpointStatus, EndpointStore, EndpointUpdate,
    EndpointUrl, HeaderValue, OsEntropy, SealedSecret, TenantId, TopicFilter,
};
use outboxkit_testing::ManualClock;
use rusqlite::Connection;

use crate::common::open;

#[tokio::test]
async fn a_version_9_file_upgrades_its_endpoints_to_no_headers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.db");
    let clock = ManualClock::new();
    let acme = TenantId::new("acme").unwrap();
    let now = clock.now();
    let e = Endpoint {
        id: EndpointId::generate(now, &OsEntropy),
        tenant: acme.clone(),
        url: EndpointUrl::parse("https://hooks.example.com/in").unwrap(),
        description: "before headers".into(),
        filter: TopicFilter::all(),
        status: EndpointStatus::Paused,
        secret: SealedSecret(vec![1; 8]),
        previous_secret: Some(SealedSecret(vec![2; 8])),
        headers: vec![],
        body_format: Default::default(),
        rate_limit: Some(5),
        fifo: false,
        last_delivery: None,
        created_at: now,
        updated_at: now,
    };
    open(&path, clock.clone())
        .await
        .create_endpoint(&e)
        .await
        .unwrap();
    // Make it the file version 9 left: no `headers` column, no version 10 record.
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE outbox_endpoints DROP COLUMN headers; \
             DELETE FROM outbox_schema_version WHERE version = 10;",
        )
        .unwrap();
    }
    let store = open(&path, clock.clone()).await;
    assert_eq!(store.get_endpoint(&acme, e.id).await.unwrap(), e);
    let h = CustomHeader {
        name: "x-a".into(),
        value: HeaderValue::Plain("1".into()),
    };
    let update = EndpointUpdate {
        set_headers: vec![h.clone()],
        ..Default::default()
    };
    store.update_endpoint(&acme, e.id, &update).await.unwrap();
    assert_eq!(
        store.get_endpoint(&acme, e.id).await.unwrap().headers,
        vec![h]
    );
}
