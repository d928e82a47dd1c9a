//! The stored form of a secret: what a [`crate::SecretVault`] seals (an endpoint's signing
//! secrets and its secret header values). Re-exported as `endpoint::SealedSecret`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A secret as stored: ciphertext produced by a [`crate::SecretVault`], bound to its
/// context (the endpoint's tenant and id, and a header's name). Debug output never shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedSecret(pub Vec<u8>);

impl fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealedSecret({} bytes)", self.0.len())
    }
}
