//! Unit tests of `endpoint.rs`: URLs, statuses and the hold/release rules of updates.

use super::*;

#[test]
fn urls_table() {
    let cases = [
        ("https://example.com/hook", true),
        ("http://example.com:8080/hook?x=1", true),
        ("https://[2001:db8::1]/x", true),
        ("https://user:pw@example.com/", false),
        ("https://user@example.com/", false),
        ("file:///etc/passwd", false),
        ("ftp://example.com/", false),
        ("not a url", false),
        ("https://example.com/#frag", false),
        ("https://", false),
    ];
    for (u, ok) in cases {
        let r = EndpointUrl::parse(u);
        assert_eq!(r.is_ok(), ok, "{u}");
        if let Err(e) = r {
            assert_eq!(e.field(), Some("url"));
        }
    }
    assert_eq!(
        EndpointUrl::parse("https://[::1]:8443/x").unwrap().host(),
        "::1"
    );
    assert_eq!(EndpointUrl::parse("http://a.example/").unwrap().port(), 80);
    assert!(!format!(
        "{:?}",
        EndpointUrl::parse("https://h.example/secret-token").unwrap()
    )
    .contains("secret-token"));
}

#[test]
fn url_length_is_checked_after_normalisation() {
    let base = "https://a.example/";
    // Accepted URLs are at most 2048 bytes as stored and parse back to themselves.
    let rows: Vec<(String, bool)> = vec![
        // 2,018 bytes typed, 6,018 stored once percent-encoded.
        (format!("{base}{}", "é".repeat(1000)), false),
        // 2,048 bytes stored: the edge.
        (
            format!("{base}{}", "é".repeat((2048 - base.len()) / 6)),
            true,
        ),
        (format!("{base}{}", "a".repeat(2048 - base.len())), true),
        (format!("{base}{}", "a".repeat(2049 - base.len())), false),
        // Typed longer than the limit, stored shorter (surrounding space trimmed).
        (format!("  {base}{}  ", "a".repeat(2040 - base.len())), true),
        (format!("{base}{}", "a".repeat(9000)), false),
    ];
    for (input, ok) in rows {
        let r = EndpointUrl::parse(&input);
        assert_eq!(r.is_ok(), ok, "{} bytes typed", input.len());
        match r {
            Ok(u) => {
                assert!(u.as_str().len() <= EndpointUrl::MAX_LEN);
                assert_eq!(EndpointUrl::parse(u.as_str()).unwrap(), u);
            }
            Err(e) => {
                assert_eq!(e.field(), Some("url"));
                assert!(!e.to_string().contains("a.example"));
            }
        }
    }
}

#[test]
fn status_changes_hold_or_release() {
    let now = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
    let set = |s: EndpointStatus| EndpointUpdate {
        status: Some(s),
        ..Default::default()
    };
    let paused = set(EndpointStatus::Paused);
    assert_eq!(paused.holds_until(now), Some(Timestamp::MAX));
    assert!(!paused.releases_held(&EndpointStatus::Paused));
    let disabled = EndpointStatus::Disabled(DisabledReason::Manual);
    let off = set(disabled.clone());
    assert_eq!(
        off.holds_until(now),
        Some(now.saturating_add(DISABLED_HOLD))
    );
    assert!(!off.releases_held(&disabled));
    let on = set(EndpointStatus::Active);
    assert_eq!(on.holds_until(now), None);
    assert!(on.releases_held(&EndpointStatus::Active));
    assert_eq!(EndpointUpdate::default().holds_until(now), None);
    assert!(!EndpointUpdate::default().releases_held(&EndpointStatus::Active));
}

#[test]
fn a_new_secret_or_url_releases_only_an_active_endpoints_holds() {
    let rotate = EndpointUpdate {
        rotate_secret: Some(SealedSecret(vec![1])),
        ..Default::default()
    };
    let moved = EndpointUpdate {
        url: Some(EndpointUrl::parse("https://b.example/hook").unwrap()),
        ..Default::default()
    };
    let paused_and_rotated = EndpointUpdate {
        status: Some(EndpointStatus::Paused),
        ..rotate.clone()
    };
    for (update, after, releases) in [
        (&rotate, EndpointStatus::Active, true),
        (&moved, EndpointStatus::Active, true),
        (&rotate, EndpointStatus::Paused, false),
        (&moved, EndpointStatus::Paused, false),
        (
            &rotate,
            EndpointStatus::Disabled(DisabledReason::Gone),
            false,
        ),
        (
            &moved,
            EndpointStatus::Disabled(DisabledReason::Manual),
            false,
        ),
        (&paused_and_rotated, EndpointStatus::Paused, false),
    ] {
        assert_eq!(
            update.releases_held(&after),
            releases,
            "{update:?} -> {after:?}"
        );
    }
}

#[test]
fn statuses_round_trip() {
    for s in [
        EndpointStatus::Active,
        EndpointStatus::Paused,
        EndpointStatus::Disabled(DisabledReason::Gone),
    ] {
        let r = s.reason().map(DisabledReason::as_str);
        assert_eq!(EndpointStatus::from_parts(s.as_str(), r).unwrap(), s);
    }
}
