//! Bearer tokens for the admin API (`outboxkit-serve`): what a token may do, how its secret
//! is made and checked, and the [`TokenStore`] every backend keeps them in.
//!
//! A token's text is `obx_<id>_<secret>`: the token's id (32 hex digits) and 32 random bytes
//! (base64url). Stores keep only the SHA-256 digest of the whole text; a presented token is
//! looked up by its id and its digest compared in constant time. The text is shown once, when
//! the token is issued, and cannot be recovered from the store.
//!
//! ```
//! use outboxkit_core::tokens::{ApiToken, PresentedToken, TokenAccess, TokenScope};
//! use outboxkit_core::{OsEntropy, TenantId, Timestamp};
//!
//! let now = Timestamp::from_unix_millis(1_700_000_000_000)?;
//! let scope = TokenScope::Tenant(TenantId::new("acme")?);
//! let (token, text) =
//!     ApiToken::issue(scope, TokenAccess::ReadOnly, "support desk", now, &OsEntropy)?;
//! let presented = PresentedToken::parse(&text)?;
//! assert_eq!(presented.id(), token.id);
//! assert!(token.verify(&presented));
//! # Ok::<(), outboxkit_core::Error>(())
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::ids::{TenantId, TokenId};
use crate::time::{Entropy, Timestamp};

/// The prefix of every token's text.
pub const TOKEN_PREFIX: &str = "obx_";

/// The longest label accepted, in bytes.
pub const MAX_TOKEN_LABEL: usize = 200;

/// What a token reaches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TokenScope {
    /// One tenant's endpoints and deliveries.
    Tenant(TenantId),
    /// Every tenant (an explicit administrator's token).
    Admin,
}

impl TokenScope {
    /// Whether this scope reaches `tenant`.
    pub fn allows(&self, tenant: &TenantId) -> bool {
        match self {
            TokenScope::Admin => true,
            TokenScope::Tenant(t) => t == tenant,
        }
    }

    /// The tenant of a tenant scope; `None` for the admin scope.
    pub fn tenant(&self) -> Option<&TenantId> {
        match self {
            TokenScope::Tenant(t) => Some(t),
            TokenScope::Admin => None,
        }
    }
}

impl fmt::Display for TokenScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenScope::Tenant(t) => write!(f, "tenant:{t}"),
            TokenScope::Admin => f.write_str("admin"),
        }
    }
}

/// What a token may do within its scope.
///
/// | access | reads | changes (endpoints, replay, …) | enqueues (`POST …/messages`) | console |
/// | --- | --- | --- | --- | --- |
/// | `Full` | yes | yes | yes | yes |
/// | `ReadOnly` | yes | no (403) | no (403) | read-only |
/// | `EnqueueOnly` | no (403) | no (403) | yes | refused |
///
/// Stores keep it as two flags, `read_only` and `enqueue_only`, never both set
/// ([`TokenAccess::from_flags`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenAccess {
    /// Read, change and enqueue.
    #[default]
    Full,
    /// Only read.
    ReadOnly,
    /// Only enqueue messages: for a service that produces events over HTTP and must not see
    /// or change anything else.
    EnqueueOnly,
}

impl TokenAccess {
    /// Whether it may read (lists, details, stats, the console).
    pub fn may_read(self) -> bool {
        !matches!(self, TokenAccess::EnqueueOnly)
    }

    /// Whether it may change endpoints and deliveries.
    pub fn may_change(self) -> bool {
        matches!(self, TokenAccess::Full)
    }

    /// Whether it may enqueue messages.
    pub fn may_enqueue(self) -> bool {
        !matches!(self, TokenAccess::ReadOnly)
    }

    /// The stored flags `(read_only, enqueue_only)`.
    pub fn flags(self) -> (bool, bool) {
        (
            matches!(self, TokenAccess::ReadOnly),
            matches!(self, TokenAccess::EnqueueOnly),
        )
    }

    /// Rebuild from the stored flags; both set is not a valid token.
    pub fn from_flags(read_only: bool, enqueue_only: bool) -> Result<Self> {
        match (read_only, enqueue_only) {
            (false, false) => Ok(TokenAccess::Full),
            (true, false) => Ok(TokenAccess::ReadOnly),
            (false, true) => Ok(TokenAccess::EnqueueOnly),
            (true, true) => Err(Error::invalid_input(
                "access",
                "a token cannot be both read-only and enqueue-only",
            )),
        }
    }

    /// `read-write`, `read-only` or `enqueue-only` (as `outbox tokens` prints it).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAccess::Full => "read-write",
            TokenAccess::ReadOnly => "read-only",
            TokenAccess::EnqueueOnly => "enqueue-only",
        }
    }
}

impl fmt::Display for TokenAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SHA-256 digest of a token's text: what stores keep instead of the token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The digest of a token's text.
    pub fn of(text: &str) -> Self {
        TokenHash(Sha256::digest(text.as_bytes()).into())
    }

    /// Rebuild a digest read back from a store (exactly 32 bytes).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b: [u8; 32] = bytes
            .try_into()
            .map_err(|_| Error::invalid_input("token_hash", "must be 32 bytes"))?;
        Ok(TokenHash(b))
    }

    /// The 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Compare in constant time (the time does not depend on where the digests differ).
    pub fn ct_eq(&self, other: &TokenHash) -> bool {
        let diff = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// A stored token: its id, scope, label and digest, never its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiToken {
    /// The id (also the middle part of the token's text).
    pub id: TokenId,
    /// Free text naming who holds it (0–200 bytes).
    pub label: String,
    /// What it reaches.
    pub scope: TokenScope,
    /// What it may do there.
    pub access: TokenAccess,
    /// The SHA-256 digest of the token's text.
    pub hash: TokenHash,
    /// When it was issued.
    pub created_at: Timestamp,
    /// When it was revoked; a revoked token verifies nothing.
    pub revoked_at: Option<Timestamp>,
}

impl ApiToken {
    /// Issue a new token: the stored value and the text to hand out once. The label must be
    /// at most 200 bytes without control characters.
    pub fn issue(
        scope: TokenScope,
        access: TokenAccess,
        label: &str,
        now: Timestamp,
        entropy: &dyn Entropy,
    ) -> Result<(ApiToken, String)> {
        check_label(label)?;
        let id = TokenId::generate(now, entropy);
        let mut secret = [0u8; 32];
        entropy.fill(&mut secret);
        let text = format!(
            "{TOKEN_PREFIX}{}_{}",
            id.as_uuid().simple(),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let token = ApiToken {
            id,
            label: label.to_owned(),
            scope,
            access,
            hash: TokenHash::of(&text),
            created_at: now,
            revoked_at: None,
        };
        Ok((token, text))
    }

    /// Whether `presented` is this token's text and the token is not revoked (the digests
    /// are compared in constant time).
    pub fn verify(&self, presented: &PresentedToken) -> bool {
        let same = self.hash.ct_eq(&presented.hash);
        same && presented.id == self.id && self.revoked_at.is_none()
    }

    /// Check the fields a store is asked to write.
    pub fn validate(&self) -> Result<()> {
        check_label(&self.label)
    }
}

/// Check a token label: at most 200 bytes, no control characters.
pub fn check_label(label: &str) -> Result<()> {
    if label.len() > MAX_TOKEN_LABEL {
        return Err(Error::invalid_input("label", "must be at most 200 bytes"));
    }
    if label.chars().any(char::is_control) {
        return Err(Error::invalid_input(
            "label",
            "must not contain control characters",
        ));
    }
    Ok(())
}

/// A token as a client presented it: its id and the digest of its text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PresentedToken {
    id: TokenId,
    hash: TokenHash,
}

impl PresentedToken {
    /// Parse `obx_<32 hex>_<43 base64url>`; anything else is `InvalidInput` (which names no
    /// part of the text).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::invalid_input("token", "is not an outbox API token");
        let rest = text.strip_prefix(TOKEN_PREFIX).ok_or_else(bad)?;
        let (id, secret) = rest.split_once('_').ok_or_else(bad)?;
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let id = TokenId::parse(id).map_err(|_| bad())?;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(secret)
            .map_err(|_| bad())?;
        if raw.len() != 32 {
            return Err(bad());
        }
        Ok(PresentedToken {
            id,
            hash: TokenHash::of(text),
        })
    }

    /// The id it names.
    pub fn id(&self) -> TokenId {
        self.id
    }
}

impl fmt::Debug for PresentedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresentedToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Where admin API tokens live (in the same store as the outbox).
///
/// # Contract
/// - A token read back MUST equal what was written, digest byte for byte, and `list_tokens`
///   MUST return every token, revoked ones included, oldest first by `(created_at, id)`
///   (`tokens_round_trip`).
/// - `create_token` with an id that exists MUST fail with `Conflict` and change nothing; a
///   label out of range MUST be `InvalidInput` and write nothing
///   (`token_create_refuses_duplicates_and_bad_labels`).
/// - `get_token` and `revoke_token` of an unknown id MUST fail with `NotFound`
///   (`unknown_token_is_not_found`).
/// - `revoke_token` MUST set `revoked_at` once: a second revoke keeps the first time; the
///   revoked token no longer verifies (`revoked_token_stays_revoked`).
/// - The token cases run with `outboxkit_testing::token_conformance_tests!`, apart from the
///   store's suite: a store that never serves the admin API need not implement this trait.
#[async_trait]
pub trait TokenStore: Send + Sync + fmt::Debug + 'static {
    /// Store a new token.
    ///
    /// # Cancel safety
    /// All or nothing; a retry after a create that was written is a `Conflict`.
    async fn create_token(&self, token: &ApiToken) -> Result<()>;
    /// Read one.
    async fn get_token(&self, id: TokenId) -> Result<ApiToken>;
    /// Every token, revoked ones included, oldest first.
    async fn list_tokens(&self) -> Result<Vec<ApiToken>>;
    /// Revoke one at `at` (a token already revoked keeps its first time); returns it as
    /// stored.
    ///
    /// # Cancel safety
    /// Cancel safe: a retry keeps the first revocation time.
    async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken>;
}

/// `dyn TokenStore`.
pub type DynTokenStore = dyn TokenStore;

macro_rules! forward {
    ($ptr:ident) => {
        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: TokenStore + ?Sized> TokenStore for $ptr<T> {
            async fn create_token(&self, token: &ApiToken) -> Result<()> {
                (**self).create_token(token).await
            }
            async fn get_token(&self, id: TokenId) -> Result<ApiToken> {
                (**self).get_token(id).await
            }
            async fn list_tokens(&self) -> Result<Vec<ApiToken>> {
                (**self).list_tokens().await
            }
            async fn revoke_token(&self, id: TokenId, at: Timestamp) -> Result<ApiToken> {
                (**self).revoke_token(id, at).await
            }
        }
    };
}

forward!(Arc);
forward!(Box);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Counter(std::sync::atomic::AtomicU8);

    impl Entropy for Counter {
        fn fill(&self, buf: &mut [u8]) {
            for b in buf {
                *b = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    fn issue(scope: TokenScope) -> (ApiToken, String) {
        let now = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        ApiToken::issue(scope, TokenAccess::Full, "ops", now, &Counter(0.into())).unwrap()
    }

    #[test]
    fn an_issued_token_verifies_and_a_changed_one_does_not() {
        let (token, text) = issue(TokenScope::Admin);
        assert!(text.starts_with("obx_"));
        assert!(token.verify(&PresentedToken::parse(&text).unwrap()));
        let mut changed = text.clone().into_bytes();
        let last = changed.len() - 2;
        changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(changed).unwrap();
        let p = PresentedToken::parse(&changed).unwrap();
        assert_eq!(p.id(), token.id);
        assert!(!token.verify(&p));
    }

    #[test]
    fn a_revoked_token_verifies_nothing() {
        let (mut token, text) = issue(TokenScope::Tenant(TenantId::new("acme").unwrap()));
        token.revoked_at = Some(token.created_at);
        assert!(!token.verify(&PresentedToken::parse(&text).unwrap()));
    }

    #[test]
    fn malformed_texts_are_refused_without_echoing_them() {
        let (_, text) = issue(TokenScope::Admin);
        for bad in [
            "",
            "obx_",
            "Bearer x",
            &text[..text.len() - 1],
            &text.replace("obx_", "obz_"),
            &format!("{text}A"),
            "obx_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let e = PresentedToken::parse(bad).unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{bad}");
            assert!(!e.to_string().contains("obx_"), "{e}");
        }
    }

    #[test]
    fn scopes_reach_their_tenant_only() {
        let acme = TenantId::new("acme").unwrap();
        let other = TenantId::new("other").unwrap();
        assert!(TokenScope::Admin.allows(&other));
        assert!(TokenScope::Tenant(acme.clone()).allows(&acme));
        assert!(!TokenScope::Tenant(acme).allows(&other));
    }

    #[test]
    fn access_allows_row_by_row_and_round_trips_its_flags() {
        // (access, reads, changes, enqueues, stored flags)
        let rows = [
            (TokenAccess::Full, true, true, true, (false, false)),
            (TokenAccess::ReadOnly, true, false, false, (true, false)),
            (TokenAccess::EnqueueOnly, false, false, true, (false, true)),
        ];
        for (access, read, change, enqueue, flags) in rows {
            assert_eq!(access.may_read(), read, "{access}");
            assert_eq!(access.may_change(), change, "{access}");
            assert_eq!(access.may_enqueue(), enqueue, "{access}");
            assert_eq!(access.flags(), flags, "{access}");
            assert_eq!(TokenAccess::from_flags(flags.0, flags.1).unwrap(), access);
        }
        let e = TokenAccess::from_flags(true, true).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{e}");
    }

    #[test]
    fn labels_are_bounded() {
        assert!(check_label(&"x".repeat(200)).is_ok());
        assert!(check_label(&"x".repeat(201)).is_err());
        assert!(check_label("a\nb").is_err());
    }

    #[test]
    fn digests_do_not_print() {
        let (token, _) = issue(TokenScope::Admin);
        assert_eq!(format!("{:?}", token.hash), "TokenHash(..)");
    }
}
