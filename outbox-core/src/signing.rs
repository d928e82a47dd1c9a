//! Standard Webhooks signing and verification (<https://www.standardwebhooks.com>).
//!
//! `webhook-signature = "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." + body))`
//! where the key is the base64-decoded part of a `whsec_…` secret. During a rotation both
//! secrets sign and the header holds both signatures, space-separated.

use std::fmt;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::time::{Entropy, Timestamp};

type HmacSha256 = Hmac<Sha256>;

/// The prefix of a secret's text form.
pub const SECRET_PREFIX: &str = "whsec_";

/// The default header prefix: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
pub const DEFAULT_HEADER_PREFIX: &str = "webhook-";

/// The default verification tolerance: five minutes either way.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A signing secret: 24 to 64 bytes, written `whsec_<base64>`. Debug output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl WebhookSecret {
    /// Parse `whsec_<base64>` (the prefix is required; standard base64 with padding, or
    /// without).
    pub fn parse(text: &str) -> Result<Self> {
        let body = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| Error::invalid_input("secret", "must start with `whsec_`"))?;
        let bytes = B64
            .decode(body)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(body))
            .map_err(|_| Error::invalid_input("secret", "the part after `whsec_` is not base64"))?;
        Self::from_bytes(bytes)
    }

    /// From raw key bytes (24–64).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        if !(24..=64).contains(&bytes.len()) {
            return Err(Error::invalid_input(
                "secret",
                "must decode to 24 to 64 bytes",
            ));
        }
        Ok(WebhookSecret(bytes))
    }

    /// A new random secret of 32 bytes.
    pub fn generate(entropy: &dyn Entropy) -> Self {
        let mut b = vec![0u8; 32];
        entropy.fill(&mut b);
        WebhookSecret(b)
    }

    /// The `whsec_…` text. Show it once, to the person who created the endpoint.
    pub fn expose(&self) -> String {
        format!("{SECRET_PREFIX}{}", B64.encode(&self.0))
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        &self.0
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
        self.mac_with(id, &timestamp.to_string(), body)
    }

    /// The MAC over `id.timestamp.body`, with the timestamp already written as decimal text.
    fn mac_with(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        SigningKey::new(self).mac_with(id, timestamp, body)
    }
}

/// A secret keyed for HMAC-SHA256 once: signing with it hashes the message only (keying
/// hashes the inner and outer key blocks, two SHA-256 blocks more per signature). The
/// dispatcher keys an endpoint's secrets once per sealed secret. Debug output never shows it.
#[derive(Clone)]
pub struct SigningKey(HmacSha256);

impl SigningKey {
    /// `secret`, keyed.
    pub fn new(secret: &WebhookSecret) -> Self {
        SigningKey(
            <HmacSha256 as Mac>::new_from_slice(&secret.0).expect("HMAC takes keys of any length"),
        )
    }

    /// The MAC over `id.timestamp.body`, from a copy of the keyed state.
    fn mac_with(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        let mut mac = self.0.clone();
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecret(<{} bytes redacted>)", self.0.len())
    }
}

/// The `webhook-signature` value for `secrets` (current first): `v1,<b64>` for each,
/// space-separated.
pub fn sign(secrets: &[&WebhookSecret], id: &str, timestamp: i64, body: &[u8]) -> String {
    sign_with(secrets, id, &timestamp.to_string(), body)
}

/// [`sign`] with the timestamp already written as decimal text (the `webhook-timestamp`
/// header's value), so a caller that sends it too writes it once. The body is read in
/// place; the only allocation is the returned header value.
pub fn sign_with(secrets: &[&WebhookSecret], id: &str, timestamp: &str, body: &[u8]) -> String {
    let keys: Vec<SigningKey> = secrets.iter().map(|s| SigningKey::new(s)).collect();
    sign_keyed(&keys, id, timestamp, body)
}

/// [`sign_with`] with secrets keyed beforehand ([`SigningKey`], current first): the same
/// header value, without keying the HMAC for each request.
pub fn sign_keyed(keys: &[SigningKey], id: &str, timestamp: &str, body: &[u8]) -> String {
    // "v1," + 44 base64 characters, and a space between signatures.
    let mut out = String::with_capacity(keys.len() * 48);
    for (i, k) in keys.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str("v1,");
        B64.encode_string(
            k.mac_with(id, timestamp, body).finalize().into_bytes(),
            &mut out,
        );
    }
    out
}

/// The three Standard Webhooks header names for a prefix (`webhook-` by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderNames {
    /// `webhook-id`
    pub id: String,
    /// `webhook-timestamp`
    pub timestamp: String,
    /// `webhook-signature`
    pub signature: String,
}

impl HeaderNames {
    /// The names under `prefix` (lowercase ASCII letters, digits and `-`, 1–32 characters).
    pub fn with_prefix(prefix: &str) -> Result<Self> {
        let ok = !prefix.is_empty()
            && prefix.len() <= 32
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(Error::misconfigured(
                "header_prefix",
                "must be 1-32 lowercase letters, digits or '-'",
            ));
        }
        Ok(HeaderNames {
            id: format!("{prefix}id"),
            timestamp: format!("{prefix}timestamp"),
            signature: format!("{prefix}signature"),
        })
    }
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames {
            id: "webhook-id".into(),
            timestamp: "webhook-timestamp".into(),
            signature: "webhook-signature".into(),
        }
    }
}

/// Why a request did not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyError {
    /// A required header is absent.
    MissingHeader(String),
    /// The timestamp is not an integer.
    InvalidTimestamp,
    /// The timestamp is older than the tolerance.
    TooOld,
    /// The timestamp is further ahead than the tolerance.
    TooNew,
    /// The signature header holds no `v1` signature.
    NoSupportedSignature,
    /// No `v1` signature matches any secret.
    Mismatch,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::MissingHeader(h) => write!(f, "missing header {h}"),
            VerifyError::InvalidTimestamp => f.write_str("the timestamp is not a number"),
            VerifyError::TooOld => f.write_str("the timestamp is too old"),
            VerifyError::TooNew => f.write_str("the timestamp is too far in the future"),
            VerifyError::NoSupportedSignature => f.write_str("no v1 signature"),
            VerifyError::Mismatch => f.write_str("no signature matches"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// Verify a received webhook: `header(name)` looks a header up (case-insensitively, as your
/// HTTP library does). Accepts when any `v1` signature matches any secret (constant-time
/// comparison) and the timestamp is within `tolerance` of `now`, either way. Signatures of
/// other versions are ignored; a header holding only those is rejected.
pub fn verify<'h>(
    secrets: &[&WebhookSecret],
    names: &HeaderNames,
    header: impl Fn(&str) -> Option<&'h str>,
    body: &[u8],
    now: Timestamp,
    tolerance: Duration,
) -> std::result::Result<(), VerifyError> {
    let get = |n: &str| header(n).ok_or_else(|| VerifyError::MissingHeader(n.to_owned()));
    let id = get(&names.id)?;
    let ts_text = get(&names.timestamp)?;
    let sig_header = get(&names.signature)?;
    let ts: i64 = ts_text
        .trim()
        .parse()
        .map_err(|_| VerifyError::InvalidTimestamp)?;
    let now_s = now.as_unix_seconds();
    let tol = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    if ts < now_s.saturating_sub(tol) {
        return Err(VerifyError::TooOld);
    }
    if ts > now_s.saturating_add(tol) {
        return Err(VerifyError::TooNew);
    }
    let candidates: Vec<Vec<u8>> = sig_header
        .split_whitespace()
        .filter_map(|part| part.strip_prefix("v1,"))
        .filter_map(|b64| B64.decode(b64).ok())
        .collect();
    if candidates.is_empty() {
        return Err(VerifyError::NoSupportedSignature);
    }
    for secret in secrets {
        let mac = secret.mac(id, ts, body);
        for c in &candidates {
            // `verify_slice` compares in constant time.
            if mac.clone().verify_slice(c).is_ok() {
                return Ok(());
            }
        }
    }
    Err(VerifyError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Vectors {
        vectors: Vec<Vector>,
    }
    #[derive(serde::Deserialize)]
    struct Vector {
        name: String,
        secret: String,
        msg_id: String,
        timestamp: i64,
        payload: String,
        signature: String,
    }

    fn vectors() -> Vec<Vector> {
        let text = include_str!("../../testdata/standard-webhooks.json");
        serde_json::from_str::<Vectors>(text).unwrap().vectors
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix_millis(secs * 1000).unwrap()
    }

    #[test]
    fn reproduces_the_published_vectors() {
        let vs = vectors();
        assert_eq!(vs.len(), 2);
        for v in vs {
            let s = WebhookSecret::parse(&v.secret).unwrap();
            assert_eq!(
                sign(&[&s], &v.msg_id, v.timestamp, v.payload.as_bytes()),
                v.signature,
                "{}",
                v.name
            );
        }
    }

    fn headers<'a>(v: &'a Vector, sig: &'a str, ts: &'a str) -> impl Fn(&str) -> Option<&'a str> {
        move |n: &str| match n {
            "webhook-id" => Some(v.msg_id.as_str()),
            "webhook-timestamp" => Some(ts),
            "webhook-signature" => Some(sig),
            _ => None,
        }
    }

    #[test]
    fn verifies_the_vectors_and_rejects_tampering() {
        let names = HeaderNames::default();
        for v in vectors() {
            let s = WebhookSecret::parse(&v.secret).unwrap();
            let ts = v.timestamp.to_string();
            let now = at(v.timestamp);
            let ok = verify(
                &[&s],
                &names,
                headers(&v, &v.signature, &ts),
                v.payload.as_bytes(),
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(ok, Ok(()), "{}", v.name);

            let other = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSX").unwrap();
            let other = if other == s {
                WebhookSecret::from_bytes(vec![7; 32]).unwrap()
            } else {
                other
            };
            let wrong_secret = verify(
                &[&other],
                &names,
                headers(&v, &v.signature, &ts),
                v.payload.as_bytes(),
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(wrong_secret, Err(VerifyError::Mismatch));

            let mut tampered = v.payload.clone().into_bytes();
            tampered[0] ^= 1;
            let r = verify(
                &[&s],
                &names,
                headers(&v, &v.signature, &ts),
                &tampered,
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::Mismatch));

            let r = verify(
                &[&s],
                &names,
                headers(&v, &v.signature, &ts),
                v.payload.as_bytes(),
                at(v.timestamp + 301),
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::TooOld));
            let r = verify(
                &[&s],
                &names,
                headers(&v, &v.signature, &ts),
                v.payload.as_bytes(),
                at(v.timestamp - 301),
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::TooNew));
            let r = verify(
                &[&s],
                &names,
                headers(&v, &v.signature, &ts),
                v.payload.as_bytes(),
                at(v.timestamp + 300),
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Ok(()), "the tolerance is inclusive");

            let only_v2 = v.signature.replacen("v1,", "v2,", 1);
            let r = verify(
                &[&s],
                &names,
                headers(&v, &only_v2, &ts),
                v.payload.as_bytes(),
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::NoSupportedSignature));
            let mixed = format!("v2,abc {}", v.signature);
            let r = verify(
                &[&s],
                &names,
                headers(&v, &mixed, &ts),
                v.payload.as_bytes(),
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Ok(()), "unknown versions beside a valid v1 are ignored");
        }
    }

    #[test]
    fn missing_headers_and_bad_timestamps() {
        let v = &vectors()[0];
        let s = WebhookSecret::parse(&v.secret).unwrap();
        let names = HeaderNames::default();
        let now = at(v.timestamp);
        for missing in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            let ts = v.timestamp.to_string();
            let h = |n: &str| {
                if n == missing {
                    None
                } else {
                    headers(v, &v.signature, &ts)(n)
                }
            };
            let r = verify(
                &[&s],
                &names,
                h,
                v.payload.as_bytes(),
                now,
                DEFAULT_TOLERANCE,
            );
            assert_eq!(r, Err(VerifyError::MissingHeader(missing.into())));
        }
        let r = verify(
            &[&s],
            &names,
            headers(v, &v.signature, "soon"),
            v.payload.as_bytes(),
            now,
            DEFAULT_TOLERANCE,
        );
        assert_eq!(r, Err(VerifyError::InvalidTimestamp));
    }

    #[test]
    fn signing_with_the_timestamp_text_is_the_same_signature() {
        let a = WebhookSecret::from_bytes(vec![1; 32]).unwrap();
        let b = WebhookSecret::from_bytes(vec![2; 32]).unwrap();
        for secrets in [vec![&a], vec![&a, &b]] {
            let with_text = sign_with(&secrets, "msg_1", "1700000000", br#"{"a":1}"#);
            assert_eq!(
                with_text,
                sign(&secrets, "msg_1", 1_700_000_000, br#"{"a":1}"#)
            );
            assert_eq!(with_text.split(' ').count(), secrets.len());
        }
    }

    #[test]
    fn keyed_signing_is_the_same_signature_and_never_prints() {
        let a = WebhookSecret::from_bytes(vec![1; 32]).unwrap();
        let b = WebhookSecret::from_bytes(vec![2; 32]).unwrap();
        let keys = [SigningKey::new(&a), SigningKey::new(&b)];
        for (keys, secrets) in [(&keys[..1], vec![&a]), (&keys[..], vec![&a, &b])] {
            // The keyed state is copied for each signature: signing twice gives the same.
            for _ in 0..2 {
                assert_eq!(
                    sign_keyed(keys, "msg_1", "1700000000", br#"{"a":1}"#),
                    sign(&secrets, "msg_1", 1_700_000_000, br#"{"a":1}"#)
                );
            }
        }
        for v in vectors() {
            let s = WebhookSecret::parse(&v.secret).unwrap();
            let ts = v.timestamp.to_string();
            let got = sign_keyed(&[SigningKey::new(&s)], &v.msg_id, &ts, v.payload.as_bytes());
            assert_eq!(got, v.signature, "{}", v.name);
        }
        assert_eq!(format!("{:?}", keys[0]), "SigningKey(<redacted>)");
    }

    #[test]
    fn rotation_signs_with_both_and_either_verifies() {
        let old = WebhookSecret::from_bytes(vec![1; 32]).unwrap();
        let new = WebhookSecret::from_bytes(vec![2; 32]).unwrap();
        let sig = sign(&[&new, &old], "msg_1", 1_700_000_000, b"{}");
        assert_eq!(sig.split(' ').count(), 2);
        let names = HeaderNames::default();
        let h = |n: &str| match n {
            "webhook-id" => Some("msg_1"),
            "webhook-timestamp" => Some("1700000000"),
            "webhook-signature" => Some(sig.as_str()),
            _ => None,
        };
        for secret in [&old, &new] {
            assert_eq!(
                verify(
                    &[secret],
                    &names,
                    h,
                    b"{}",
                    at(1_700_000_000),
                    DEFAULT_TOLERANCE
                ),
                Ok(())
            );
        }
    }

    #[test]
    fn secrets_parse_with_clear_errors() {
        let cases = [
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", true),
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", false),
            ("whsec_", false),
            ("whsec_!!!notbase64!!!", false),
            ("whsec_c2hvcnQ=", false),
            (&format!("whsec_{}", B64.encode([0u8; 65])), false),
        ];
        for (text, ok) in cases {
            let r = WebhookSecret::parse(text);
            assert_eq!(r.is_ok(), ok, "{text}");
            if let Err(e) = r {
                assert_eq!(e.field(), Some("secret"));
                assert!(
                    !e.to_string().contains(text.trim_start_matches("whsec_")) || text.len() < 8
                );
            }
        }
    }

    #[test]
    fn generated_secrets_round_trip_and_never_print() {
        #[derive(Debug)]
        struct Fixed;
        impl Entropy for Fixed {
            fn fill(&self, b: &mut [u8]) {
                b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
            }
        }
        let s = WebhookSecret::generate(&Fixed);
        assert_eq!(s.key().len(), 32);
        let text = s.expose();
        assert!(text.starts_with("whsec_"));
        assert_eq!(WebhookSecret::parse(&text).unwrap(), s);
        assert!(!format!("{s:?}").contains(&text[6..]));
    }

    #[test]
    fn header_prefixes() {
        let n = HeaderNames::with_prefix("svix-").unwrap();
        assert_eq!(n.signature, "svix-signature");
        assert!(HeaderNames::with_prefix("Bad Prefix").is_err());
    }
}
