//! The egress policy: addresses as a data table, and URLs through the real transport with
//! the default policy. Every refused target is first checked by the pure policy, so a
//! regression fails the test before any packet could leave the machine.

use std::net::IpAddr;

use outboxkit_core::{EndpointUrl, ErrorClass, ErrorKind, WebhookTransport};
use outboxkit_http::{AddressKind, EgressError, EgressPolicy, EgressRefusal, HttpTransport};
use outboxkit_testing::WebhookReceiver;

use crate::support::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn addresses_are_judged_by_kind() {
    use AddressKind::*;
    let rows: &[(&str, Option<AddressKind>)] = &[
        // public
        ("93.184.215.14", None),
        ("1.1.1.1", None),
        ("172.32.0.1", None),
        ("100.128.0.1", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::808:808", None),
        ("2002:808:808::1", None),
        // IPv4
        ("127.0.0.1", Some(Loopback)),
        ("127.255.255.254", Some(Loopback)),
        ("10.0.0.1", Some(Private)),
        ("10.1.2.3", Some(Private)),
        ("172.16.0.1", Some(Private)),
        ("172.31.255.255", Some(Private)),
        ("192.168.1.1", Some(Private)),
        ("169.254.1.1", Some(LinkLocal)),
        ("169.254.169.254", Some(Metadata)),
        ("100.100.100.200", Some(Metadata)),
        ("100.64.0.1", Some(SharedAddressSpace)),
        ("100.127.255.255", Some(SharedAddressSpace)),
        ("0.0.0.0", Some(Unspecified)),
        ("0.1.2.3", Some(ThisNetwork)),
        ("255.255.255.255", Some(Broadcast)),
        ("224.0.0.1", Some(Multicast)),
        ("239.255.255.250", Some(Multicast)),
        ("192.0.2.1", Some(Documentation)),
        ("198.51.100.7", Some(Documentation)),
        ("203.0.113.9", Some(Documentation)),
        ("198.18.0.1", Some(Benchmarking)),
        ("198.19.255.255", Some(Benchmarking)),
        ("192.0.0.8", Some(Reserved)),
        ("240.0.0.1", Some(Reserved)),
        // IPv6
        ("::1", Some(Loopback)),
        ("::", Some(Unspecified)),
        ("fe80::1", Some(LinkLocal)),
        ("febf::1", Some(LinkLocal)),
        ("fec0::1", Some(Private)),
        ("fc00::1", Some(UniqueLocal)),
        ("fd12:3456::1", Some(UniqueLocal)),
        ("fd00:ec2::254", Some(Metadata)),
        ("ff02::1", Some(Multicast)),
        ("2001:db8::1", Some(Documentation)),
        ("3fff::1", Some(Documentation)),
        ("2001:2::1", Some(Benchmarking)),
        ("100::1", Some(Reserved)),
        ("4000::1", Some(Reserved)),
        // IPv6 forms carrying IPv4
        ("::ffff:127.0.0.1", Some(Loopback)),
        ("::ffff:10.0.0.1", Some(Private)),
        ("::ffff:169.254.169.254", Some(Metadata)),
        ("::ffff:0.0.0.0", Some(Unspecified)),
        ("::127.0.0.1", Some(Loopback)),
        ("::8.8.8.8", Some(Reserved)),
        ("64:ff9b::a00:1", Some(Private)),
        ("2002:7f00:1::1", Some(Loopback)),
        ("2002:a9fe:a9fe::1", Some(Metadata)),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", Some(Private)),
    ];
    let policy = EgressPolicy::default();
    for (text, want) in rows {
        assert_eq!(AddressKind::of(ip(text)), *want, "{text}");
        let got = policy.check_ip(ip(text));
        match want {
            None => assert_eq!(got, Ok(()), "{text}"),
            Some(kind) => {
                let refusal = got.expect_err(text);
                assert_eq!(refusal, EgressRefusal::Address(*kind), "{text}");
                assert!(
                    !refusal.to_string().contains(text),
                    "no address in {refusal}"
                );
            }
        }
    }
}

#[test]
fn the_allow_list_admits_cidrs_and_addresses() {
    let policy = EgressPolicy::default()
        .allow_cidr("10.0.0.0/8")
        .unwrap()
        .allow_cidr(" fd00::/8 ")
        .unwrap()
        .allow_cidr("192.168.7.7")
        .unwrap();
    let rows = [
        ("10.1.2.3", true),
        ("::ffff:10.1.2.3", true),
        ("fd00::1", true),
        ("192.168.7.7", true),
        ("192.168.7.8", false),
        // An allowed CIDR never admits a cloud metadata address (issue 31).
        ("fd00:ec2::254", false),
        ("fe80::1", false),
        ("127.0.0.1", false),
    ];
    for (text, ok) in rows {
        assert_eq!(policy.check_ip(ip(text)).is_ok(), ok, "{text}");
    }
    for bad in ["", "10.0.0.0/33", "localhost", "10.0.0"] {
        let e = EgressPolicy::default().allow_cidr(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
        assert_eq!(e.field(), Some("cidr"));
    }
}

/// The well-known cloud metadata addresses, as a list: refused by every policy, whatever
/// `allow_private`, the allowed CIDRs and the allowed hosts say (issue 31).
const METADATA: &[&str] = &[
    "169.254.169.254",
    "169.254.170.2",
    "169.254.170.23",
    "169.254.169.253",
    "169.254.169.123",
    "100.100.100.200",
    "169.254.0.23",
    "169.254.42.42",
    "192.0.0.192",
    "168.63.129.16",
    "fd00:ec2::254",
    "fd00:ec2::253",
    "fd00:ec2::123",
    "fd00:ec2::23",
    "fd20:ce::254",
    "fd00:42::42",
    "::ffff:169.254.170.2",
    "::ffff:100.100.100.200",
];

#[tokio::test]
async fn every_metadata_address_is_refused_in_every_mode() {
    let listed: Vec<IpAddr> = outboxkit_http::METADATA_ADDRESSES.to_vec();
    for text in METADATA {
        let addr = ip(text);
        let plain = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        assert!(
            listed.contains(&plain),
            "{text} is not in METADATA_ADDRESSES"
        );
        assert_eq!(AddressKind::of(addr), Some(AddressKind::Metadata), "{text}");
        let host = if addr.is_ipv6() {
            format!("[{text}]")
        } else {
            (*text).to_owned()
        };
        let modes = [
            EgressPolicy::default(),
            EgressPolicy::default().allow_private(true),
            EgressPolicy::default()
                .allow_http(true)
                .allow_private(true)
                .allow_cidr("0.0.0.0/0")
                .unwrap()
                .allow_cidr("::/0")
                .unwrap(),
            EgressPolicy::default().allow_cidr(text).unwrap(),
            EgressPolicy::default().allow_host(&host).allow_host(text),
        ];
        for (i, policy) in modes.iter().enumerate() {
            assert_eq!(
                policy.check_ip(addr),
                Err(EgressRefusal::Address(AddressKind::Metadata)),
                "{text}, mode {i}"
            );
            let url = EndpointUrl::parse(&format!("https://{host}/latest")).unwrap();
            assert_eq!(
                policy.check_url(&url),
                Err(EgressRefusal::Address(AddressKind::Metadata)),
                "{text}, mode {i}"
            );
            assert_eq!(
                policy.resolve(&host).await,
                Err(EgressError::Refused(EgressRefusal::Address(
                    AddressKind::Metadata
                ))),
                "{text}, mode {i}"
            );
        }
    }
}

#[test]
fn urls_are_checked_for_scheme_and_literal_hosts() {
    let url = |s: &str| EndpointUrl::parse(s).unwrap();
    let d = EgressPolicy::default();
    assert_eq!(
        d.check_url(&url("http://example.com/")),
        Err(EgressRefusal::Scheme)
    );
    assert_eq!(d.check_url(&url("https://example.com/")), Ok(()));
    assert_eq!(
        d.check_url(&url("https://127.1/")),
        Err(EgressRefusal::Address(AddressKind::Loopback))
    );
    assert_eq!(
        d.check_url(&url("https://[::ffff:a9fe:a9fe]/")),
        Err(EgressRefusal::Address(AddressKind::Metadata))
    );
    let local = loopback_policy();
    assert_eq!(local.check_url(&url("http://127.0.0.1:8080/")), Ok(()));
    let cidr_only = EgressPolicy::default().allow_cidr("127.0.0.0/8").unwrap();
    assert_eq!(
        cidr_only.check_url(&url("http://127.0.0.1:8080/")),
        Err(EgressRefusal::Scheme),
        "the allow-list does not admit http"
    );
    let by_name = EgressPolicy::default().allow_host("[::1]");
    assert_eq!(by_name.check_url(&url("https://[::1]/")), Ok(()));
}

#[tokio::test]
async fn names_resolve_through_the_policy() {
    let d = EgressPolicy::default();
    for name in ["localhost", "LOCALHOST.", "api.localhost"] {
        assert_eq!(
            d.resolve(name).await,
            Err(EgressError::Refused(EgressRefusal::Address(
                AddressKind::Loopback
            ))),
            "{name}"
        );
    }
    assert_eq!(
        d.resolve("nonexistent.invalid").await,
        Err(EgressError::NotFound)
    );
    assert_eq!(
        d.resolve("10.1.2.3").await,
        Err(EgressError::Refused(EgressRefusal::Address(
            AddressKind::Private
        )))
    );
    let allowed = EgressPolicy::default().allow_host("Localhost");
    let addrs = allowed.resolve("localhost").await.unwrap();
    assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
}

#[tokio::test]
async fn the_default_policy_refuses_without_connecting() {
    let r = WebhookReceiver::start().await.unwrap();
    let port = r.addr().port();
    let t = HttpTransport::new(EgressPolicy::default()).unwrap();
    let default = EgressPolicy::default();
    let rows: Vec<(String, ErrorClass)> = vec![
        (r.url(), ErrorClass::EgressRefused),
        (
            format!("https://127.0.0.1:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        (
            format!("https://127.1:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        (
            format!("https://[::1]:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        (
            format!("https://[::ffff:127.0.0.1]:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        (
            format!("https://localhost:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        (
            format!("https://LocalHost.:{port}/hook"),
            ErrorClass::EgressRefused,
        ),
        ("https://127.0.0.1/".into(), ErrorClass::EgressRefused),
        ("https://[::1]/".into(), ErrorClass::EgressRefused),
        (
            "https://[::ffff:10.0.0.1]/".into(),
            ErrorClass::EgressRefused,
        ),
        (
            "https://169.254.169.254/latest/meta-data/".into(),
            ErrorClass::EgressRefused,
        ),
        ("https://[fd00:ec2::254]/".into(), ErrorClass::EgressRefused),
        ("https://100.100.100.200/".into(), ErrorClass::EgressRefused),
        ("https://10.1.2.3/".into(), ErrorClass::EgressRefused),
        ("https://192.168.0.10/".into(), ErrorClass::EgressRefused),
        ("https://localhost/".into(), ErrorClass::EgressRefused),
        ("https://nonexistent.invalid/".into(), ErrorClass::Dns),
    ];
    for (url, class) in rows {
        let endpoint = EndpointUrl::parse(&url).unwrap();
        // the guard: an IP literal must already fail the pure check
        if !matches!(endpoint.url().host(), Some(url::Host::Domain(_))) {
            assert!(
                default.check_url(&endpoint).is_err(),
                "{url} passes the pure check"
            );
        }
        let resp = t.send(plain(&url, WAIT)).await;
        assert_eq!(failure(&resp), Some(class), "{url}: {resp:?}");
        let want = if class == ErrorClass::Dns {
            "the host name did not resolve"
        } else if url.starts_with("http:") {
            "the egress policy allows only https"
        } else {
            "the egress policy refuses "
        };
        assert!(resp.excerpt().starts_with(want), "{url}: {resp:?}");
    }
    assert_eq!(r.connections(), 0, "no connection reached the receiver");
    assert_eq!(r.count(), 0);
}

#[tokio::test]
async fn an_allowed_host_name_reaches_the_receiver() {
    let r = WebhookReceiver::start().await.unwrap();
    let port = r.addr().port();
    let t = HttpTransport::new(
        EgressPolicy::default()
            .allow_http(true)
            .allow_host("localhost"),
    )
    .unwrap();
    let resp = t
        .send(plain(&format!("http://localhost:{port}/hook"), WAIT))
        .await;
    assert_eq!(status(&resp), Some(200), "{resp:?}");
    // the same name without the allow-list goes through the resolver and is refused
    let strict = HttpTransport::new(EgressPolicy::default().allow_http(true)).unwrap();
    let resp = strict
        .send(plain(&format!("http://localhost:{port}/hook"), WAIT))
        .await;
    assert_eq!(failure(&resp), Some(ErrorClass::EgressRefused), "{resp:?}");
    assert_eq!(r.count(), 1);
}

#[test]
fn bad_transport_settings_are_misconfigured() {
    use outboxkit_http::HttpTransportConfig;
    let cases = [
        HttpTransportConfig {
            timeout: std::time::Duration::ZERO,
            ..Default::default()
        },
        HttpTransportConfig {
            max_body: 0,
            ..Default::default()
        },
        HttpTransportConfig {
            user_agent: "bad\nagent".into(),
            ..Default::default()
        },
    ];
    for config in cases {
        let e = HttpTransport::with_config(EgressPolicy::default(), config).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misconfigured);
    }
}
