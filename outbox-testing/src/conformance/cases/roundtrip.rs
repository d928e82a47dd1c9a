//! Round trips: what a store returns equals what was written, byte for byte — generated
//! messages, endpoints and attempt records that pass validation, with values at the edges of
//! every limit (longest topic, tenant and keys, a 256 KiB payload of any bytes, 64 headers of
//! 8 KiB, a 2,048-byte URL, 500-character descriptions, 100 filter patterns, unicode and
//! quoting everywhere). Values come from fixed seeds, a few dozen per case, so every store
//! runs them quickly and a failure reproduces.

use std::collections::BTreeSet;
use std::time::Duration;

use outboxkit_core::{
    endpoint::MAX_RATE_LIMIT, AttemptOutcome, BodyFormat, Cause, ClaimRequest, Completion,
    ConsumerName, Destination, DisabledReason, EndpointStatus, EndpointUrl, ErrorClass, ErrorKind,
    Limits, Message, MessageId, NewMessage, SealedSecret, TopicFilter, TopicPattern, ValidMessage,
    Verdict,
};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

use super::helpers::*;
use crate::conformance::Fixture;
use crate::strategies;

/// `n` values of `strategy` from the fixed seed.
fn generate<S: Strategy>(strategy: S, n: usize) -> Vec<S::Value> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .expect("a value from the strategy")
                .current()
        })
        .collect()
}

/// Bytes `0..=255` repeated to `len`: NUL, invalid UTF-8 and every other byte.
fn every_byte(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 256) as u8).collect()
}

/// Messages at the edges of every limit.
fn edge_messages(fx: &Fixture) -> Vec<NewMessage> {
    let limits = Limits::default();
    let visible: String = (0x21u8..=0x7e).map(char::from).collect();
    let key = |salt: &str| {
        let mut k = format!("{salt}{visible}");
        k.truncate(200);
        k
    };
    let long_topic = format!("{}.{}", "a".repeat(63), "b-_9".repeat(16));
    let mut full = NewMessage::raw(long_topic, every_byte(limits.max_payload_bytes))
        .tenant(format!("T-_.:@{}", "z".repeat(58)))
        .ordering_key(key("o"))
        .idempotency_key(key("i"))
        .delay(limits.max_delay);
    for i in 0..limits.max_headers {
        let name = format!("h{i:03}-{}", "N_.".repeat(41));
        let value = format!("é\t\"'\\{{}}😀 {i} ").repeat(8 * 1024 / 24);
        full = full.header(name, value);
    }
    for i in 0..limits.max_recipients {
        full = full.email(format!("ünï+{i}@exämple.com"));
    }
    let recipient_320 = format!("{}@example.com", "r".repeat(320 - 12));
    vec![
        full,
        NewMessage::raw("a", Vec::new()).idempotency_key("k"),
        NewMessage::raw(
            "a.b",
            b"{\"id\":12345678901234567890123,\"a\":1,\"a\":2,\"e\":1e400,\"n\":1.50}".to_vec(),
        ),
        NewMessage::raw("a.b", "  \"é\\u00e9😀\"\n".as_bytes().to_vec())
            .header("empty", "")
            .email(recipient_320)
            .email(" spaced <x@example.com> ; 'q'"),
        NewMessage::raw("a.b", vec![0u8; 3]).caused_by(Cause {
            handler: ConsumerName::new(format!("c{}", "-".repeat(63))).expect("a valid name"),
            message_id: MessageId::generate(now(fx), &outboxkit_core::OsEntropy),
            topic: topic("a.b"),
            depth: limits.max_depth,
        }),
    ]
}

/// The message a store must return for `valid`, written at `created_at` as `id`.
fn expected(valid: &ValidMessage, id: MessageId, created_at: outboxkit_core::Timestamp) -> Message {
    Message {
        id,
        topic: valid.topic.clone(),
        payload: valid.payload.clone(),
        tenant: valid.tenant.clone(),
        ordering_key: valid.ordering_key.clone(),
        idempotency_key: valid.idempotency_key.clone(),
        available_at: valid.available_at,
        headers: valid.headers.clone(),
        cause: valid.cause.clone(),
        created_at,
    }
}

/// Messages read back (by id, by claim, and their e-mail deliveries) equal what was
/// enqueued: payload bytes, topic, tenant, keys, headers, cause, due time, recipients. Half
/// are written one by one, half in one batch.
pub async fn messages_round_trip_byte_for_byte(fx: Fixture) {
    let consumer = add_consumer(&fx, "roundtrip", "*").await;
    let limits = Limits::default();
    let mut messages = edge_messages(&fx);
    messages.extend(generate(strategies::new_message(), 24));
    let at = now(&fx);
    let valid: Vec<ValidMessage> = messages
        .iter()
        .map(|m| {
            m.clone()
                .validate(&limits, at)
                .expect("generated messages are valid")
        })
        .collect();
    let half = messages.len() / 2;
    let batch = messages.split_off(half);
    let mut written = Vec::new();
    for m in messages {
        written.push(enqueue(&fx, m).await);
    }
    written.extend(
        fx.store()
            .enqueue_batch(batch)
            .await
            .expect("enqueue_batch"),
    );

    let mut want = Vec::new();
    for (v, w) in valid.iter().zip(&written) {
        if w.duplicate {
            continue; // a generated idempotency key seen before
        }
        let msg = expected(v, w.message_id, at);
        let got = fx
            .store()
            .get_message(&v.tenant, w.message_id)
            .await
            .expect("get_message");
        assert_eq!(got, msg, "get_message returns what was enqueued");
        // One delivery per recipient (and one for the consumer), naming it exactly.
        let deliveries = list_all(&fx, &v.tenant, &Default::default()).await;
        let recipients: BTreeSet<String> = deliveries
            .iter()
            .filter(|d| d.message_id == w.message_id)
            .filter_map(|d| match &d.destination {
                Destination::Email(r) => Some(r.as_str().to_owned()),
                _ => None,
            })
            .collect();
        let sent: BTreeSet<String> = v.emails.iter().map(|r| r.as_str().to_owned()).collect();
        assert_eq!(recipients, sent, "recipients round trip");
        want.push(msg);
    }

    // The claim path decodes the same messages.
    fx.clock().advance(limits.max_delay);
    let req = ClaimRequest::new(1000, LEASE).handler(consumer, 10);
    let claimed = claim(&fx, &req).await;
    assert_eq!(
        claimed.len(),
        want.len(),
        "one delivery per message for the consumer"
    );
    for c in claimed {
        let w = want
            .iter()
            .find(|m| m.id == c.message.id)
            .expect("a claimed message was written");
        assert_eq!(&c.message, w, "claim returns what was enqueued");
    }
}

/// URLs that pass [`EndpointUrl::parse`], up to the 2,048-byte limit once normalised.
fn urls() -> Vec<EndpointUrl> {
    let base = "https://a.example/";
    let mut out: Vec<EndpointUrl> = [
        format!("{base}{}", "a".repeat(EndpointUrl::MAX_LEN - base.len())),
        format!(
            "{base}{}",
            "é".repeat((EndpointUrl::MAX_LEN - base.len()) / 6)
        ),
        "https://bücher.example/pfad/é?q=ü&x=\"'<>`{}|\\^%00%zz&&=#".replace('#', ""),
        "http://[2001:db8::1]:8443/x/../y/./z?a=1;b=2".to_owned(),
        "https://h.example:443/a%2Fb//c?%E2%82%AC=%e2%82%ac+ &".to_owned(),
        "HTTPS://UPPER.Example/Path?Q".to_owned(),
        "https://xn--bcher-kva.example".to_owned(),
        "https://1.2.3.4/".to_owned(),
    ]
    .iter()
    .map(|u| EndpointUrl::parse(u).expect("a valid url"))
    .collect();
    out.extend(
        generate("[a-zA-Z0-9é😀/?&=%._~!$'()*+,;:@ -]{0,64}", 16)
            .into_iter()
            .filter_map(|p| EndpointUrl::parse(&format!("https://g.example/{p}")).ok()),
    );
    out
}

/// Endpoints read back (one by one and listed) equal what was written, and so do updates.
pub async fn endpoints_round_trip(fx: Fixture) {
    let descriptions = generate(
        "[ -~é😀\"'\\\\\n\t]{0,500}".prop_filter("no tab", |d| !d.contains('\t')),
        8,
    );
    let longest_prefix = topic(&"p".repeat(128));
    let many: Vec<TopicPattern> = (0..100)
        .map(|i| match i {
            0 => TopicPattern::Prefix(longest_prefix.clone()),
            1 => TopicPattern::All,
            i => TopicPattern::Exact(topic(&format!("t{i}.x-y_z"))),
        })
        .collect();
    let filters = [
        TopicFilter::all(),
        TopicFilter::new(many).expect("100 patterns"),
        TopicFilter::parse("a.b, c.*").expect("a valid filter"),
    ];
    let statuses = [
        EndpointStatus::Active,
        EndpointStatus::Paused,
        EndpointStatus::Disabled(DisabledReason::Gone),
    ];
    let mut written = Vec::new();
    for (i, url) in urls().into_iter().enumerate() {
        let mut e = endpoint_row(&fx, if i % 2 == 0 { "acme" } else { "b:@._-" }, "*");
        e.url = url;
        e.description = match i {
            0 => "é".repeat(500),
            1 => String::new(),
            _ => descriptions[i % descriptions.len()].clone(),
        };
        e.filter = filters[i % filters.len()].clone();
        e.status = statuses[i % statuses.len()].clone();
        e.secret = SealedSecret(every_byte(32 + i));
        e.previous_secret = (i % 2 == 1).then(|| SealedSecret(every_byte(300).split_off(i)));
        e.body_format = if i % 2 == 0 {
            BodyFormat::Envelope
        } else {
            BodyFormat::Raw
        };
        e.rate_limit = [None, Some(1), Some(MAX_RATE_LIMIT)][i % 3];
        if i % 2 == 0 {
            e.headers = vec![
                outboxkit_core::CustomHeader {
                    name: format!("x-h{i}"),
                    value: outboxkit_core::HeaderValue::Plain("\"q\" \\ 'v'\t~".to_owned()),
                },
                outboxkit_core::CustomHeader {
                    name: "x-sealed".to_owned(),
                    value: outboxkit_core::HeaderValue::Secret(SealedSecret(every_byte(40 + i))),
                },
            ];
        }
        fx.store()
            .create_endpoint(&e)
            .await
            .expect("create_endpoint");
        written.push(e);
    }
    for e in &written {
        let got = fx
            .store()
            .get_endpoint(&e.tenant, e.id)
            .await
            .expect("get_endpoint");
        assert_eq!(&got, e, "get_endpoint returns what was written");
        let listed = fx
            .store()
            .list_endpoints(&e.tenant)
            .await
            .expect("list_endpoints");
        assert_eq!(
            listed.iter().find(|l| l.id == e.id),
            Some(e),
            "listed as written"
        );
    }
    // An update to the edge values reads back as `EndpointUpdate::apply` says.
    let mut e = written.swap_remove(2);
    let update = outboxkit_core::EndpointUpdate {
        url: Some(urls().swap_remove(0)),
        description: Some("ü\n".repeat(250)),
        filter: Some(filters[1].clone()),
        rate_limit: Some(Some(MAX_RATE_LIMIT)),
        ..Default::default()
    };
    fx.clock().advance(secs(1));
    fx.store()
        .update_endpoint(&e.tenant, e.id, &update)
        .await
        .expect("update_endpoint");
    update.apply(&mut e, now(&fx));
    let got = fx
        .store()
        .get_endpoint(&e.tenant, e.id)
        .await
        .expect("get_endpoint");
    assert_eq!(got, e, "an update reads back as applied");

    // Past the edges: refused as `InvalidInput`, nothing written or changed.
    for bad in [0, MAX_RATE_LIMIT + 1, u32::MAX] {
        let mut row = endpoint_row(&fx, "acme", "*");
        row.rate_limit = Some(bad);
        assert_kind(
            fx.store().create_endpoint(&row).await,
            ErrorKind::InvalidInput,
            "create_endpoint with a rate limit out of range",
        );
        assert_kind(
            fx.store().get_endpoint(&row.tenant, row.id).await,
            ErrorKind::NotFound,
            "a refused endpoint is not written",
        );
        let update = outboxkit_core::EndpointUpdate {
            rate_limit: Some(Some(bad)),
            ..Default::default()
        };
        assert_kind(
            fx.store().update_endpoint(&e.tenant, e.id, &update).await,
            ErrorKind::InvalidInput,
            "update_endpoint with a rate limit out of range",
        );
    }
    let unchanged = fx
        .store()
        .get_endpoint(&e.tenant, e.id)
        .await
        .expect("get_endpoint");
    assert_eq!(unchanged, e, "refused updates change nothing");
}

/// Attempt records read back from the ledger equal what was completed: every outcome class,
/// status codes from none to 599, and excerpts at the 300-byte limit with unicode and quotes.
pub async fn attempts_round_trip(fx: Fixture) {
    let consumer = add_consumer(&fx, "ledger", "*").await;
    enqueue(&fx, msg("a.b")).await;
    let outcomes = [
        AttemptOutcome::Succeeded,
        AttemptOutcome::Failed(ErrorClass::Timeout),
        AttemptOutcome::Failed(ErrorClass::Network),
        AttemptOutcome::Failed(ErrorClass::Dns),
        AttemptOutcome::Failed(ErrorClass::EgressRefused),
        AttemptOutcome::Failed(ErrorClass::Redirect),
        AttemptOutcome::Failed(ErrorClass::Response4xx),
        AttemptOutcome::Failed(ErrorClass::Response5xx),
        AttemptOutcome::Failed(ErrorClass::HandlerError),
        AttemptOutcome::Failed(ErrorClass::Snoozed),
        AttemptOutcome::Failed(ErrorClass::Discarded),
        AttemptOutcome::Failed(ErrorClass::MailNotSent),
        AttemptOutcome::Failed(ErrorClass::MailUnknown),
        AttemptOutcome::Failed(ErrorClass::MailRefused),
        AttemptOutcome::Failed(ErrorClass::Unrenderable),
    ];
    let codes = [None, Some(100), Some(200), Some(418), Some(599), Some(999)];
    let texts = generate("[ -~é😀\"'\\\\\n\t\u{0}-\u{1f}]{0,200}", outcomes.len());
    let req = ClaimRequest::new(10, LEASE).handler(consumer, 1000);
    let mut want = Vec::new();
    let mut id = None;
    for (i, outcome) in outcomes.iter().enumerate() {
        let c = claim_one(&fx, &req).await;
        id = Some(c.delivery.id);
        let started = now(&fx);
        fx.clock()
            .advance(Duration::from_millis(1 + i as u64 * 997));
        let text = match i {
            0 => "é".repeat(200),
            1 => "\"'\\😀".repeat(100),
            _ => texts[i].clone(),
        };
        let mut rec = record(&http(503), started, now(&fx), Some(&text)).expect("a record");
        rec.outcome = *outcome;
        rec.status_code = codes[i % codes.len()];
        if i == 2 {
            rec.excerpt = None;
        }
        let verdict = Verdict::Retry {
            at: now(&fx).saturating_add(secs(1)),
        };
        fx.store()
            .complete(
                &c.lease,
                &Completion {
                    verdict,
                    attempt: Some(rec.clone()),
                },
            )
            .await
            .expect("complete");
        want.push(rec);
        fx.clock().advance(secs(1));
    }
    let id = id.expect("a delivery");
    let got = fx
        .store()
        .attempts(&outboxkit_core::TenantId::default(), id)
        .await
        .expect("attempts");
    let records: Vec<_> = got.iter().map(|a| a.record.clone()).collect();
    assert_eq!(records, want, "the ledger returns what was completed");
    assert_eq!(
        got.iter().map(|a| a.number).collect::<Vec<_>>(),
        (1..=want.len() as u32).collect::<Vec<_>>()
    );
}
