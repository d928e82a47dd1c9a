//! Secrets at rest: [`SecretVault`] seals endpoint secrets bound to their tenant and
//! endpoint, so a sealed secret copied to another endpoint does not open.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};

use crate::endpoint::SealedSecret;
use crate::error::{Error, ErrorKind, Result};
use crate::ids::{EndpointId, TenantId};
use crate::time::Entropy;

/// What a sealed secret is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretContext {
    bytes: Vec<u8>,
}

impl SecretContext {
    /// The context of an endpoint's signing secret.
    pub fn endpoint(tenant: &TenantId, endpoint: EndpointId) -> Self {
        SecretContext {
            bytes: format!("outbox/endpoint-secret/v1\n{tenant}\n{endpoint}").into_bytes(),
        }
    }

    /// The context of the secret value of an endpoint's custom header `name` (lowercase):
    /// a sealed value moved to another tenant, endpoint or header does not open.
    pub fn endpoint_header(tenant: &TenantId, endpoint: EndpointId, name: &str) -> Self {
        SecretContext {
            bytes: format!("outbox/endpoint-header/v1\n{tenant}\n{endpoint}\n{name}").into_bytes(),
        }
    }

    /// The bytes authenticated with the ciphertext.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Seals and opens secrets.
///
/// # Contract
/// - `open(seal(p, c), c)` MUST return `p`.
/// - `open(seal(p, c), c')` with `c' != c` MUST fail with [`ErrorKind::InvalidInput`]
///   (a secret moved to another tenant or endpoint does not open).
/// - Errors MUST NOT contain the plaintext.
#[async_trait]
pub trait SecretVault: Send + Sync + fmt::Debug + 'static {
    /// Encrypt `plain` for `context`.
    async fn seal(&self, plain: &[u8], context: &SecretContext) -> Result<SealedSecret>;
    /// Decrypt for `context`.
    async fn open(&self, sealed: &SealedSecret, context: &SecretContext) -> Result<Vec<u8>>;
}

/// A shared [`SecretVault`].
pub type DynSecretVault = dyn SecretVault;

#[async_trait]
impl<T: SecretVault + ?Sized> SecretVault for Arc<T> {
    async fn seal(&self, plain: &[u8], context: &SecretContext) -> Result<SealedSecret> {
        (**self).seal(plain, context).await
    }
    async fn open(&self, sealed: &SealedSecret, context: &SecretContext) -> Result<Vec<u8>> {
        (**self).open(sealed, context).await
    }
}

#[async_trait]
impl<T: SecretVault + ?Sized> SecretVault for Box<T> {
    async fn seal(&self, plain: &[u8], context: &SecretContext) -> Result<SealedSecret> {
        (**self).seal(plain, context).await
    }
    async fn open(&self, sealed: &SealedSecret, context: &SecretContext) -> Result<Vec<u8>> {
        (**self).open(sealed, context).await
    }
}

const AEAD_VERSION: u8 = 1;
const NONCE_LEN: usize = 12;

/// ChaCha20-Poly1305 with a 32-byte key. Sealed form: `0x01 ‖ nonce(12) ‖ ciphertext+tag`,
/// the context as associated data.
pub struct AeadVault {
    cipher: ChaCha20Poly1305,
    entropy: Arc<dyn Entropy>,
}

impl AeadVault {
    /// A vault with `key` (exactly 32 bytes) and a nonce source.
    pub fn new(key: &[u8], entropy: Arc<dyn Entropy>) -> Result<Self> {
        if key.len() != 32 {
            return Err(Error::misconfigured(
                "vault.key",
                "must be exactly 32 bytes",
            ));
        }
        Ok(AeadVault {
            cipher: ChaCha20Poly1305::new(Key::from_slice(key)),
            entropy,
        })
    }

    /// A vault whose key is given as 64 hex digits (e.g. from `OUTBOX_VAULT_KEY`).
    pub fn from_hex(hex: &str, entropy: Arc<dyn Entropy>) -> Result<Self> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::misconfigured(
                "vault.key",
                "must be 64 hexadecimal digits",
            ));
        }
        let key: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
            .collect();
        Self::new(&key, entropy)
    }
}

impl fmt::Debug for AeadVault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AeadVault(chacha20poly1305, key redacted)")
    }
}

#[async_trait]
impl SecretVault for AeadVault {
    async fn seal(&self, plain: &[u8], context: &SecretContext) -> Result<SealedSecret> {
        let mut nonce = [0u8; NONCE_LEN];
        self.entropy.fill(&mut nonce);
        let ct = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| Error::new(ErrorKind::Unexpected, "sealing a secret failed"))?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + ct.len());
        out.push(AEAD_VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(SealedSecret(out))
    }

    async fn open(&self, sealed: &SealedSecret, context: &SecretContext) -> Result<Vec<u8>> {
        let b = &sealed.0;
        if b.len() < 1 + NONCE_LEN + 16 || b[0] != AEAD_VERSION {
            return Err(Error::invalid_input(
                "secret",
                "is not a sealed secret of this vault",
            ));
        }
        self.cipher
            .decrypt(
                Nonce::from_slice(&b[1..1 + NONCE_LEN]),
                Payload {
                    msg: &b[1 + NONCE_LEN..],
                    aad: context.as_bytes(),
                },
            )
            .map_err(|_| Error::invalid_input("secret", "does not open with this key and context"))
    }
}

/// Stores secrets as they are, framed with their context so a secret moved to another
/// endpoint still fails to open. For tests and local demos only.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlaintextVault;

#[async_trait]
impl SecretVault for PlaintextVault {
    async fn seal(&self, plain: &[u8], context: &SecretContext) -> Result<SealedSecret> {
        let ctx = context.as_bytes();
        let mut out = Vec::with_capacity(4 + ctx.len() + plain.len());
        out.extend_from_slice(&(ctx.len() as u32).to_be_bytes());
        out.extend_from_slice(ctx);
        out.extend_from_slice(plain);
        Ok(SealedSecret(out))
    }

    async fn open(&self, sealed: &SealedSecret, context: &SecretContext) -> Result<Vec<u8>> {
        let b = &sealed.0;
        let bad = || Error::invalid_input("secret", "does not open with this context");
        let len =
            u32::from_be_bytes(b.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        let ctx = b.get(4..4 + len).ok_or_else(bad)?;
        if ctx != context.as_bytes() {
            return Err(bad());
        }
        Ok(b[4 + len..].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::OsEntropy;
    use crate::time::Timestamp;

    fn ctx(tenant: &str, n: u8) -> SecretContext {
        let id = EndpointId::generate(
            Timestamp::from_unix_millis(i64::from(n) * 1000).unwrap(),
            &OsEntropy,
        );
        SecretContext::endpoint(&TenantId::new(tenant).unwrap(), id)
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn aead_round_trip_and_context_binding() {
        block_on(async {
            let v = AeadVault::new(&[9; 32], Arc::new(OsEntropy)).unwrap();
            let (a, b, c) = (ctx("acme", 1), ctx("acme", 2), ctx("other", 1));
            let sealed = v.seal(b"topsecret", &a).await.unwrap();
            assert!(
                !sealed.0.windows(9).any(|w| w == b"topsecret"),
                "ciphertext hides the plaintext"
            );
            assert_eq!(v.open(&sealed, &a).await.unwrap(), b"topsecret");
            assert_eq!(
                v.open(&sealed, &b).await.unwrap_err().kind(),
                ErrorKind::InvalidInput
            );
            assert!(v.open(&sealed, &c).await.is_err());
            let again = v.seal(b"topsecret", &a).await.unwrap();
            assert_ne!(again, sealed, "a fresh nonce every time");
            let other_key = AeadVault::new(&[8; 32], Arc::new(OsEntropy)).unwrap();
            assert!(other_key.open(&sealed, &a).await.is_err());
            let mut flipped = sealed.clone();
            let last = flipped.0.len() - 1;
            flipped.0[last] ^= 1;
            assert!(v.open(&flipped, &a).await.is_err());
            assert!(v.open(&SealedSecret(vec![1, 2, 3]), &a).await.is_err());
        });
    }

    #[test]
    fn aead_keys_are_checked() {
        assert!(AeadVault::new(&[0; 31], Arc::new(OsEntropy)).is_err());
        assert!(AeadVault::from_hex(&"ab".repeat(32), Arc::new(OsEntropy)).is_ok());
        assert!(AeadVault::from_hex("zz", Arc::new(OsEntropy)).is_err());
        assert!(!format!(
            "{:?}",
            AeadVault::new(&[7; 32], Arc::new(OsEntropy)).unwrap()
        )
        .contains('7'));
    }

    #[test]
    fn plaintext_vault_binds_context_too() {
        block_on(async {
            let (a, b) = (ctx("acme", 1), ctx("acme", 2));
            let sealed = PlaintextVault.seal(b"s", &a).await.unwrap();
            assert_eq!(PlaintextVault.open(&sealed, &a).await.unwrap(), b"s");
            assert!(PlaintextVault.open(&sealed, &b).await.is_err());
            assert!(PlaintextVault
                .open(&SealedSecret(vec![0, 0]), &b)
                .await
                .is_err());
        });
    }
}
