//! Signatures of bundles (P8, P10): the keys of the remote tier also sign
//! the bundles `kiln export` writes and verify the ones `kiln import`
//! reads, so that a bundle is trusted exactly as a remote entry is.
//!
//! ```text
//! scheme u8 | keyed BLAKE3 [32]                       (scheme 1: the fleet key)
//!           | public key [32] + Ed25519 signature [64] (scheme 2)
//! ```
//!
//! Both are over a BLAKE3 digest, derived under a context of their own, of
//! what the bundle asks to be signed (its end section, whose closing digest
//! covers every byte before it): never valid as a remote entry's
//! authenticator, nor the reverse.

use std::fmt;

use crate::keys::{Keys, PublicKey};

const CONTEXT: &str = "kiln bundle signature 1";
const KEYED: u8 = 1;
const ED25519: u8 = 2;

/// Who signed a bundle that verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleSigner {
    /// A holder of the fleet key.
    Fleet,
    /// The holder of the signing key of this public key.
    Key(PublicKey),
}

impl fmt::Display for BundleSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fleet => f.write_str("the fleet key"),
            Self::Key(public) => write!(f, "{public}"),
        }
    }
}

fn digest(signed: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(CONTEXT);
    hasher.update(signed);
    *hasher.finalize().as_bytes()
}

impl Keys {
    /// The signature of a bundle whose signed bytes are `signed`, and who
    /// signs: with the Ed25519 signing key when this node holds one, else
    /// with the fleet key; `None` when it holds neither.
    pub fn sign_bundle(&self, signed: &[u8]) -> Option<(Vec<u8>, BundleSigner)> {
        let message = digest(signed);
        if let Some(signing) = &self.signing {
            let mut signature = vec![ED25519];
            signature.extend_from_slice(signing.public_key().bytes());
            signature.extend_from_slice(&signing.sign(&message));
            return Some((signature, BundleSigner::Key(signing.public_key())));
        }
        let fleet = self.fleet.as_ref()?;
        let mut signature = vec![KEYED];
        signature.extend_from_slice(blake3::keyed_hash(fleet.bytes(), &message).as_bytes());
        Some((signature, BundleSigner::Fleet))
    }

    /// Who signed a bundle whose signed bytes are `signed`, if `signature`
    /// verifies with a key this node trusts.
    ///
    /// # Errors
    ///
    /// Why the bundle is not trusted, in words for a person: unsigned,
    /// malformed, signed by a key not trusted here, or a signature that
    /// does not match (the bundle changed after it was signed).
    pub fn verify_bundle(
        &self,
        signed: &[u8],
        signature: Option<&[u8]>,
    ) -> Result<BundleSigner, String> {
        let Some(signature) = signature else {
            return Err("it is not signed (its exporter held no signing key)".to_owned());
        };
        let message = digest(signed);
        match (signature.first(), signature.len()) {
            (Some(&KEYED), 33) => {
                let Some(fleet) = &self.fleet else {
                    return Err(
                        "it is signed with a fleet key, and this machine holds none \
                         (KILN_REMOTE_KEY)"
                            .to_owned(),
                    );
                };
                let expected = blake3::keyed_hash(fleet.bytes(), &message);
                let found = blake3::Hash::from_bytes(signature[1..].try_into().expect("32 bytes"));
                // `blake3::Hash` compares in constant time.
                if expected == found {
                    Ok(BundleSigner::Fleet)
                } else {
                    Err(
                        "its fleet-key signature does not match: it was signed with another \
                         fleet's key, or changed after it was signed"
                            .to_owned(),
                    )
                }
            }
            (Some(&ED25519), 97) => {
                let public = PublicKey::from_bytes(signature[1..33].try_into().expect("32 bytes"));
                if !self.trusts(&public) {
                    return Err(format!(
                        "it is signed by {public}, which this machine does not trust (add it to \
                         KILN_REMOTE_TRUSTED_KEYS if it is a build machine's)"
                    ));
                }
                let bytes: [u8; 64] = signature[33..].try_into().expect("64 bytes");
                if public.verify(&message, &bytes) {
                    Ok(BundleSigner::Key(public))
                } else {
                    Err(
                        "its Ed25519 signature does not match: it was changed after it was signed"
                            .to_owned(),
                    )
                }
            }
            _ => Err("its signature is malformed".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen;

    #[test]
    fn a_signed_bundle_verifies_only_unchanged_and_with_a_trusted_key() {
        // P8, P10
        let builder = Keys {
            signing: Some(keygen::signing_key().unwrap()),
            ..Keys::default()
        };
        let public = builder.signing.as_ref().unwrap().public_key();
        let node = Keys {
            trusted: vec![public],
            ..Keys::default()
        };
        let (signature, signer) = builder.sign_bundle(b"end").expect("a builder signs");
        assert_eq!(signer, BundleSigner::Key(public));
        assert_eq!(node.verify_bundle(b"end", Some(&signature)), Ok(signer));
        assert!(node.verify_bundle(b"End", Some(&signature)).is_err());
        assert!(node.sign_bundle(b"end").is_none(), "a node cannot sign");
        let stranger = Keys {
            trusted: vec![keygen::signing_key().unwrap().public_key()],
            ..Keys::default()
        };
        let refusal = stranger
            .verify_bundle(b"end", Some(&signature))
            .unwrap_err();
        assert!(refusal.contains("does not trust"), "{refusal}");
        for index in 0..signature.len() {
            let mut forged = signature.clone();
            forged[index] ^= 1;
            assert!(node.verify_bundle(b"end", Some(&forged)).is_err());
        }

        let fleet = Keys {
            fleet: Some(keygen::fleet_key().unwrap()),
            ..Keys::default()
        };
        let (signature, signer) = fleet.sign_bundle(b"end").unwrap();
        assert_eq!(signer, BundleSigner::Fleet);
        assert!(fleet.verify_bundle(b"end", Some(&signature)).is_ok());
        let other = Keys {
            fleet: Some(keygen::fleet_key().unwrap()),
            ..Keys::default()
        };
        assert!(other.verify_bundle(b"end", Some(&signature)).is_err());
        assert!(
            node.verify_bundle(b"end", None)
                .unwrap_err()
                .contains("not signed")
        );
    }
}
