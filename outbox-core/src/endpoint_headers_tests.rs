//! Unit tests of `endpoint_headers.rs`: which names and values are accepted.

use super::*;

#[test]
fn header_names_table() {
    let default = HeaderNames::default();
    let prefixed = HeaderNames::with_prefix("svix-").unwrap();
    // (name, accepted with the default names, accepted with the `svix-` prefix)
    let cases: &[(&str, Option<&str>, bool)] = &[
        ("Authorization", Some("authorization"), true),
        ("X-Api-Key", Some("x-api-key"), true),
        (
            "x-route_to.v2~!#$%&'*+^`|",
            Some("x-route_to.v2~!#$%&'*+^`|"),
            true,
        ),
        ("", None, false),
        ("X Api", None, false),
        ("X:Api", None, false),
        ("x-é", None, false),
        ("x-a\r\nevil", None, false),
        ("(x)", None, false),
        ("Host", None, false),
        ("content-length", None, false),
        ("Content-Type", None, false),
        ("content-encoding", None, false),
        ("Transfer-Encoding", None, false),
        ("connection", None, false),
        ("keep-alive", None, false),
        ("TE", None, false),
        ("trailer", None, false),
        ("upgrade", None, false),
        ("expect", None, false),
        ("proxy-authorization", None, false),
        ("Proxy-Connection", None, false),
        ("webhook-id", None, false),
        ("Webhook-Signature", None, false),
        ("webhook-timestamp", None, false),
        ("webhook-anything", None, false),
        ("user-agent", None, false),
        ("traceparent", None, false),
        ("tracestate", None, false),
        ("svix-id", Some("svix-id"), false),
        ("svix-signature", Some("svix-signature"), false),
        ("svix-other", Some("svix-other"), true),
    ];
    for (name, lower, with_prefix) in cases {
        let r = check_header_name(name, &default);
        assert_eq!(r.as_deref().ok(), *lower, "{name:?}");
        if let Err(e) = r {
            assert_eq!(e.field(), Some("headers"), "{name:?}");
            if !name.is_empty() && name.is_ascii() && !name.contains(['\r', '\n']) {
                assert!(
                    e.to_string()
                        .to_ascii_lowercase()
                        .contains(&name.to_ascii_lowercase()),
                    "the error names the header: {e}"
                );
            }
        }
        assert_eq!(
            check_header_name(name, &prefixed).is_ok(),
            *with_prefix && !name.to_ascii_lowercase().starts_with("webhook-"),
            "{name:?} with the svix- prefix"
        );
    }
    assert!(check_header_name(&"x".repeat(MAX_HEADER_NAME), &default).is_ok());
    assert!(check_header_name(&"x".repeat(MAX_HEADER_NAME + 1), &default).is_err());
}

#[test]
fn header_values_table() {
    let cases: &[(&str, bool)] = &[
        ("Bearer abc.def", true),
        ("a\tb", true),
        ("~!@#$%^&*()", true),
        ("", false),
        (" leading", false),
        ("trailing ", false),
        ("a\r\nx-evil: 1", false),
        ("a\nb", false),
        ("a\rb", false),
        ("nul\0", false),
        ("del\x7f", false),
        ("café", false),
    ];
    for (v, ok) in cases {
        let r = check_header_value("x-key", v);
        assert_eq!(r.is_ok(), *ok, "{v:?}");
        if let Err(e) = r {
            assert!(e.to_string().contains("x-key"), "{e}");
            assert!(
                v.is_empty() || !e.to_string().contains(v),
                "no value in: {e}"
            );
        }
    }
    assert!(check_header_value("x", &"v".repeat(MAX_HEADER_VALUE)).is_ok());
    assert!(check_header_value("x", &"v".repeat(MAX_HEADER_VALUE + 1)).is_err());
}

fn input(name: &str, value: &str) -> HeaderInput {
    HeaderInput {
        name: name.into(),
        value: value.into(),
        secret: false,
    }
}

#[test]
fn inputs_refuse_duplicates_in_any_case_and_too_many() {
    let names = HeaderNames::default();
    let ok = check_inputs(&[input("X-A", "1"), input("x-b", "2")], &names).unwrap();
    assert_eq!(ok, ["x-a", "x-b"]);
    let dup = check_inputs(&[input("X-A", "1"), input("x-a", "2")], &names).unwrap_err();
    assert!(dup.to_string().contains("x-a"), "{dup}");
    let many: Vec<_> = (0..=MAX_HEADERS)
        .map(|i| input(&format!("x-{i}"), "v"))
        .collect();
    assert!(check_inputs(&many[..MAX_HEADERS], &names).is_ok());
    assert!(check_inputs(&many, &names).is_err());
}

#[test]
fn parse_takes_curl_form() {
    let h = HeaderInput::parse("X-Api-Key:  abc: def ", true).unwrap();
    assert_eq!(
        (h.name.as_str(), h.value.as_str(), h.secret),
        ("X-Api-Key", "abc: def", true)
    );
    assert!(HeaderInput::parse("no colon", false).is_err());
    assert!(!format!("{h:?}").contains("abc"));
}

#[test]
fn stored_form_round_trips_and_debug_hides_values() {
    let list = vec![
        CustomHeader {
            name: "x-plain".into(),
            value: HeaderValue::Plain("visible-value".into()),
        },
        CustomHeader {
            name: "x-secret".into(),
            value: HeaderValue::Secret(SealedSecret(vec![0, 1, 2, 255])),
        },
    ];
    let text = encode_headers(&list);
    assert_eq!(decode_headers(&text).unwrap(), list);
    assert_eq!(decode_headers("").unwrap(), vec![]);
    assert_eq!(decode_headers("[]").unwrap(), vec![]);
    assert!(decode_headers("{").is_err());
    let debug = format!("{list:?}");
    assert!(!debug.contains("visible-value"), "{debug}");
    assert!(debug.contains("x-plain"));
    check_headers(&list).unwrap();
    let mut upper = list.clone();
    upper[0].name = "X-Plain".into();
    assert!(check_headers(&upper).is_err());
}

#[test]
fn merge_replaces_in_place_appends_and_removes_in_any_case() {
    let h = |n: &str, v: &str| CustomHeader {
        name: n.into(),
        value: HeaderValue::Plain(v.into()),
    };
    let mut list = vec![h("x-a", "1"), h("x-b", "2"), h("x-c", "3")];
    merge_headers(
        &mut list,
        &[h("x-b", "two"), h("x-d", "4")],
        &["X-C".into()],
    );
    assert_eq!(list, vec![h("x-a", "1"), h("x-b", "two"), h("x-d", "4")]);
}
