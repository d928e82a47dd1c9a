//! Verifying received webhooks in one call: [`Verifier`] holds the endpoint's secrets (two
//! during a rotation), the header names and the tolerance, and checks a request's headers and
//! body against them with the current time.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::signing::{verify, HeaderNames, VerifyError, WebhookSecret, DEFAULT_TOLERANCE};
use crate::system::SystemClock;
use crate::time::DynClock;

/// Looks a request header up by name, case-insensitively (HTTP header names are).
///
/// Implemented for `http::HeaderMap` (with the `http` feature: axum, hyper, reqwest and
/// actix-web 4 use it), for maps of `String` to `String` and for slices of name/value pairs;
/// implement it for your framework's header type in a few lines.
pub trait HeaderLookup {
    /// The value of the header `name` (lowercase), when present and valid UTF-8.
    fn header(&self, name: &str) -> Option<&str>;
}

#[cfg(feature = "http")]
impl HeaderLookup for http::HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}

impl HeaderLookup for HashMap<String, String> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl HeaderLookup for BTreeMap<String, String> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl<K: AsRef<str>, V: AsRef<str>> HeaderLookup for [(K, V)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

impl<T: HeaderLookup + ?Sized> HeaderLookup for &T {
    fn header(&self, name: &str) -> Option<&str> {
        (**self).header(name)
    }
}

/// A Standard Webhooks verifier for a receiver: the secrets of one endpoint (the current one,
/// and the previous one while a rotation is under way), the header names (`webhook-` by
/// default) and a tolerance of 5 minutes either way.
///
/// ```
/// use outboxkit_core::{sign, Clock, SystemClock, Verifier, WebhookSecret};
///
/// let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
/// let verifier = Verifier::new([secret.clone()])?;
///
/// // What the sender puts on the request (normally read from the request itself).
/// let body = br#"{"type":"order.created","timestamp":"2026-11-30T12:00:00Z","data":{"id":42}}"#;
/// let now = SystemClock.now().as_unix_seconds();
/// let signature = sign(&[&secret], "msg_1", now, body);
/// let headers = [
///     ("webhook-id", "msg_1".to_string()),
///     ("webhook-timestamp", now.to_string()),
///     ("webhook-signature", signature),
/// ];
/// verifier.verify(&headers[..], body).expect("a valid request verifies");
/// assert!(verifier.verify(&headers[..], b"tampered").is_err());
/// # Ok::<(), outboxkit_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Verifier {
    secrets: Vec<WebhookSecret>,
    names: HeaderNames,
    tolerance: Duration,
    clock: Arc<DynClock>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &self.secrets.len())
            .field("names", &self.names)
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for one endpoint's secrets (one, or two during a rotation), with the
    /// default header names, a 5-minute tolerance and the system clock. An empty list is a
    /// `Misconfigured` error.
    pub fn new(secrets: impl IntoIterator<Item = WebhookSecret>) -> Result<Self> {
        let secrets: Vec<WebhookSecret> = secrets.into_iter().collect();
        if secrets.is_empty() {
            return Err(crate::Error::misconfigured(
                "secrets",
                "a verifier needs at least one secret",
            ));
        }
        Ok(Verifier {
            secrets,
            names: HeaderNames::default(),
            tolerance: DEFAULT_TOLERANCE,
            clock: Arc::new(SystemClock),
        })
    }

    /// Headers under another prefix (as configured on the sender).
    pub fn header_names(mut self, names: HeaderNames) -> Self {
        self.names = names;
        self
    }

    /// Another tolerance for the timestamp (5 minutes by default).
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Another clock (a manual one in tests).
    pub fn clock(mut self, clock: Arc<DynClock>) -> Self {
        self.clock = clock;
        self
    }

    /// Check a request: every header present, the timestamp within the tolerance of now,
    /// and a `v1` signature over exactly `body` made with one of the secrets (compared in
    /// constant time). Verify the body bytes as received, before parsing them.
    pub fn verify(
        &self,
        headers: &(impl HeaderLookup + ?Sized),
        body: &[u8],
    ) -> std::result::Result<(), VerifyError> {
        let secrets: Vec<&WebhookSecret> = self.secrets.iter().collect();
        verify(
            &secrets,
            &self.names,
            |name| headers.header(name),
            body,
            self.clock.now(),
            self.tolerance,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::sign;
    use crate::time::{Clock, Timestamp};

    #[derive(Debug)]
    struct Fixed(Timestamp);

    impl Clock for Fixed {
        fn now(&self) -> Timestamp {
            self.0
        }
    }

    const NOW: i64 = 1_700_000_000;

    fn verifier(secrets: Vec<WebhookSecret>) -> Verifier {
        Verifier::new(secrets).unwrap().clock(Arc::new(Fixed(
            Timestamp::from_unix_millis(NOW * 1000).unwrap(),
        )))
    }

    fn headers(sig: String, ts: i64) -> Vec<(&'static str, String)> {
        vec![
            ("Webhook-Id", "msg_1".to_owned()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", sig),
        ]
    }

    #[test]
    fn verifies_in_one_call_with_either_secret_of_a_rotation() {
        let old = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let new = WebhookSecret::parse("whsec_c2VjcmV0LWtleS1mb3ItdGVzdGluZy0xMjM0").unwrap();
        let v = verifier(vec![new.clone(), old.clone()]);
        for s in [&old, &new] {
            let h = headers(sign(&[s], "msg_1", NOW, b"body"), NOW);
            assert_eq!(v.verify(&h[..], b"body"), Ok(()));
        }
        let h = headers(sign(&[&old], "msg_1", NOW, b"body"), NOW);
        assert_eq!(v.verify(&h[..], b"bodY"), Err(VerifyError::Mismatch));
        assert_eq!(
            verifier(vec![new]).verify(&h[..], b"body"),
            Err(VerifyError::Mismatch)
        );
    }

    #[test]
    fn refuses_outside_the_tolerance_and_missing_headers() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let v = verifier(vec![s.clone()]);
        let stale = NOW - 301;
        let h = headers(sign(&[&s], "msg_1", stale, b"b"), stale);
        assert_eq!(v.verify(&h[..], b"b"), Err(VerifyError::TooOld));
        let ahead = NOW + 301;
        let h = headers(sign(&[&s], "msg_1", ahead, b"b"), ahead);
        assert_eq!(v.verify(&h[..], b"b"), Err(VerifyError::TooNew));
        let h = headers(sign(&[&s], "msg_1", stale, b"b"), stale);
        let lenient = v.clone().tolerance(Duration::from_secs(400));
        assert_eq!(lenient.verify(&h[..], b"b"), Ok(()));
        let none: HashMap<String, String> = HashMap::new();
        assert_eq!(
            v.verify(&none, b"b"),
            Err(VerifyError::MissingHeader("webhook-id".into()))
        );
        assert!(Verifier::new(Vec::new()).is_err());
    }

    #[test]
    fn maps_look_headers_up_case_insensitively() {
        let mut m = BTreeMap::new();
        m.insert("WEBHOOK-ID".to_owned(), "x".to_owned());
        assert_eq!(m.header("webhook-id"), Some("x"));
        let h: HashMap<String, String> = m.into_iter().collect();
        assert_eq!(h.header("webhook-id"), Some("x"));
        assert_eq!(h.header("webhook-timestamp"), None);
    }

    #[cfg(feature = "http")]
    #[test]
    fn takes_an_http_header_map() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let mut map = http::HeaderMap::new();
        map.insert("webhook-id", "msg_1".parse().unwrap());
        map.insert("webhook-timestamp", NOW.to_string().parse().unwrap());
        let sig = sign(&[&s], "msg_1", NOW, b"{}");
        map.insert("webhook-signature", sig.parse().unwrap());
        assert_eq!(verifier(vec![s]).verify(&map, b"{}"), Ok(()));
    }
}
