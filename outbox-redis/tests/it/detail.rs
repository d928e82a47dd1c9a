//! The attempt in full on Redis: kept in the delivery's ledger entry after its record, never
//! copied to the endpoint's last status (which every completion of the endpoint rewrites and
//! every endpoint read parses), and absent from entries written before it was kept.

use std::time::Duration;

use outboxkit_core::{
    AttemptDetail, AttemptOutcome, AttemptRecord, Clock, Completion, DeliveryStore,
    DeliveryStoreExt as _, EndpointStore, Ledger, MessageStore, NewMessage, TenantId, Verdict,
};
use outboxkit_testing::ManualClock;

use crate::common::{admin, isolated, store};

#[tokio::test]
async fn an_attempt_in_full_stays_out_of_the_endpoints_last_status() {
    isolated(|prefix| async move {
        let clock = ManualClock::new();
        let s = store(&prefix, clock.clone()).await;
        let t = TenantId::default();
        let e = outboxkit_testing::sample_endpoint(&t, clock.now());
        s.create_endpoint(&e).await.unwrap();
        s.enqueue(NewMessage::new("order.created", serde_json::json!({})))
            .await
            .unwrap();
        let request = outboxkit_core::ClaimRequest::new(10, Duration::from_secs(60)).webhooks(5);
        let got = s.claim(&request).await.unwrap().remove(0);
        let mut detail = AttemptDetail {
            request_headers: vec![("webhook-id".into(), "msg_1".into())],
            ..AttemptDetail::default()
        };
        detail.set_response_body(&[b'x'; 4096], 1024);
        let now = clock.now();
        let record = AttemptRecord {
            started_at: now,
            finished_at: now,
            outcome: AttemptOutcome::Succeeded,
            status_code: Some(200),
            excerpt: Some("ok".into()),
            detail: Some(Box::new(detail)),
        };
        let completion = Completion {
            verdict: Verdict::Succeeded,
            attempt: Some(record.clone()),
        };
        s.complete(&got.lease, &completion).await.unwrap();

        let last: String = redis::cmd("HGET")
            .arg(format!("{prefix}:e:{}", e.id))
            .arg("last")
            .query_async(&mut admin().await)
            .await
            .expect("the endpoint's last status");
        let without = AttemptRecord {
            detail: None,
            ..record.clone()
        };
        assert_eq!(last, serde_json::to_string(&without).unwrap());
        let seen = s.get_endpoint(&t, e.id).await.unwrap().last_delivery;
        assert_eq!(seen.map(|l| l.status_code), Some(Some(200)));
        let attempts = s.attempts(&t, got.delivery.id).await.unwrap();
        assert_eq!(
            attempts.into_iter().map(|a| a.record).collect::<Vec<_>>(),
            vec![record],
            "the ledger keeps the attempt in full"
        );
    })
    .await;
}
