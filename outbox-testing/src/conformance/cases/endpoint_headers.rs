//! Endpoints' custom headers: plain and sealed values round-trip exactly through create,
//! get, list and update; updates replace, remove and set them; a refused change writes
//! nothing; another tenant cannot touch them.

use outboxkit_core::endpoint_headers::{MAX_HEADERS, MAX_HEADER_VALUE};
use outboxkit_core::{
    CustomHeader, Endpoint, EndpointUpdate, ErrorKind, HeaderValue, SealedSecret,
};

use super::helpers::*;
use crate::conformance::Fixture;

fn plain(name: &str, value: &str) -> CustomHeader {
    CustomHeader {
        name: name.to_owned(),
        value: HeaderValue::Plain(value.to_owned()),
    }
}

fn sealed(name: &str, bytes: Vec<u8>) -> CustomHeader {
    CustomHeader {
        name: name.to_owned(),
        value: HeaderValue::Secret(SealedSecret(bytes)),
    }
}

/// The most headers, at the edges: the longest plain value of every visible character,
/// quotes and backslashes, and sealed values of every byte (NUL, invalid UTF-8).
fn edge_headers() -> Vec<CustomHeader> {
    let visible: String = (0x20u8..=0x7e).map(char::from).collect();
    let long: String = visible.repeat(MAX_HEADER_VALUE / visible.len() + 1)[1..]
        .chars()
        .take(MAX_HEADER_VALUE)
        .collect();
    (0..MAX_HEADERS)
        .map(|i| match i % 3 {
            0 => plain(&format!("x-plain-{i}"), long.trim()),
            1 => sealed(
                &format!("x-sealed-{i}_.~!#$%&'*+^`|"),
                (0..=255u8).cycle().skip(i).take(64 + i).collect(),
            ),
            _ => plain(&format!("authorization{i}"), "Bearer \"a\\b\"\t'c'"),
        })
        .collect()
}

async fn get(fx: &Fixture, e: &Endpoint) -> Endpoint {
    fx.store()
        .get_endpoint(&e.tenant, e.id)
        .await
        .expect("get_endpoint")
}

/// Headers read back (one by one and listed) exactly as written, in order; an update
/// replaces the list, removes and sets headers (a set header of the same name keeps its
/// place), and an endpoint without headers reads back with none.
pub async fn endpoint_headers_round_trip(fx: Fixture) {
    let bare = add_endpoint(&fx, "acme", "*").await;
    assert_eq!(
        get(&fx, &bare).await.headers,
        vec![],
        "no headers by default"
    );
    fx.clock().advance(secs(1));
    let mut e = endpoint_row(&fx, "acme", "*");
    e.headers = edge_headers();
    fx.store()
        .create_endpoint(&e)
        .await
        .expect("create_endpoint");
    assert_eq!(
        get(&fx, &e).await,
        e,
        "get_endpoint returns the headers as written"
    );
    let listed = fx
        .store()
        .list_endpoints(&e.tenant)
        .await
        .expect("list_endpoints");
    assert_eq!(listed, vec![bare.clone(), e.clone()]);

    fx.clock().advance(secs(1));
    let update = EndpointUpdate {
        remove_headers: vec!["X-PLAIN-0".to_owned()],
        set_headers: vec![
            sealed("authorization2", vec![0, 255, 1]),
            plain("x-new", "v"),
        ],
        ..Default::default()
    };
    let got = fx
        .store()
        .update_endpoint(&e.tenant, e.id, &update)
        .await
        .expect("update_endpoint");
    let mut want = e.clone();
    update.apply(&mut want, now(&fx));
    assert_eq!(want.headers.len(), MAX_HEADERS, "one removed, one added");
    assert_eq!(want.headers[1], sealed("authorization2", vec![0, 255, 1]));
    assert_eq!(got, want);
    assert_eq!(get(&fx, &e).await, want);

    let replace = EndpointUpdate {
        headers: Some(vec![plain("x-only", "1")]),
        ..Default::default()
    };
    let got = fx
        .store()
        .update_endpoint(&e.tenant, e.id, &replace)
        .await
        .expect("update_endpoint");
    assert_eq!(got.headers, vec![plain("x-only", "1")]);
    let clear = EndpointUpdate {
        headers: Some(vec![]),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&e.tenant, e.id, &clear)
        .await
        .expect("update_endpoint");
    assert_eq!(get(&fx, &e).await.headers, vec![], "all removed");
    // Other changes leave them as they are.
    let set = EndpointUpdate {
        headers: Some(vec![plain("x-a", "1"), sealed("x-b", vec![9; 40])]),
        ..Default::default()
    };
    fx.store()
        .update_endpoint(&e.tenant, e.id, &set)
        .await
        .expect("update_endpoint");
    let other = EndpointUpdate {
        description: Some("changed".to_owned()),
        rotate_secret: Some(SealedSecret(vec![3; 32])),
        ..Default::default()
    };
    let got = fx
        .store()
        .update_endpoint(&e.tenant, e.id, &other)
        .await
        .expect("update_endpoint");
    assert_eq!(
        got.headers,
        vec![plain("x-a", "1"), sealed("x-b", vec![9; 40])]
    );
    assert_eq!(get(&fx, &e).await, got);
}

/// Headers a store must refuse (too many, a name outbox or HTTP sets, a name twice or not
/// lowercase, a value with CR/LF) are `InvalidInput` and write nothing, on create and on
/// update; another tenant's update of them is `NotFound` and changes nothing.
pub async fn bad_endpoint_headers_change_nothing(fx: Fixture) {
    let mut e = endpoint_row(&fx, "acme", "*");
    e.headers = vec![plain("x-a", "1"), sealed("x-s", vec![1, 2, 3])];
    fx.store()
        .create_endpoint(&e)
        .await
        .expect("create_endpoint");
    let too_many: Vec<CustomHeader> = (0..=MAX_HEADERS)
        .map(|i| plain(&format!("x-{i}"), "v"))
        .collect();
    let bad_lists = [
        too_many,
        vec![plain("webhook-id", "forged")],
        vec![plain("content-length", "1")],
        vec![plain("x-a", "1"), plain("x-a", "2")],
        vec![plain("X-Upper", "1")],
        vec![plain("x-crlf", "a\r\nx-evil: 1")],
    ];
    for (i, list) in bad_lists.iter().enumerate() {
        let mut bad = endpoint_row(&fx, "acme", "*");
        bad.headers = list.clone();
        assert_kind(
            fx.store().create_endpoint(&bad).await,
            ErrorKind::InvalidInput,
            &format!("create with bad headers #{i}"),
        );
        assert_kind(
            fx.store().get_endpoint(&bad.tenant, bad.id).await,
            ErrorKind::NotFound,
            "a refused create writes nothing",
        );
        let update = EndpointUpdate {
            headers: Some(list.clone()),
            description: Some("not written".to_owned()),
            ..Default::default()
        };
        assert_kind(
            fx.store().update_endpoint(&e.tenant, e.id, &update).await,
            ErrorKind::InvalidInput,
            &format!("update with bad headers #{i}"),
        );
        assert_eq!(get(&fx, &e).await, e, "a refused update writes nothing");
    }
    // Set headers that would take the endpoint past the most it may have.
    let past = EndpointUpdate {
        set_headers: (0..MAX_HEADERS - 1)
            .map(|i| plain(&format!("x-more-{i}"), "v"))
            .collect(),
        ..Default::default()
    };
    assert_kind(
        fx.store().update_endpoint(&e.tenant, e.id, &past).await,
        ErrorKind::InvalidInput,
        "an update past the most headers",
    );
    assert_eq!(get(&fx, &e).await, e, "a refused update writes nothing");

    let other = tenant("other");
    let theirs = EndpointUpdate {
        headers: Some(vec![]),
        ..Default::default()
    };
    assert_kind(
        fx.store().update_endpoint(&other, e.id, &theirs).await,
        ErrorKind::NotFound,
        "another tenant's update",
    );
    assert_kind(
        fx.store().get_endpoint(&other, e.id).await,
        ErrorKind::NotFound,
        "another tenant's read",
    );
    assert_eq!(get(&fx, &e).await, e, "another tenant changes nothing");
}
