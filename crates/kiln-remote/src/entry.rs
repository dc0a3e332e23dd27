//! One remote entry: a self-describing value, whole or absent (P3), that
//! carries what it is, the digest of the key it was written for, when, the
//! work it saved, its bytes and an authenticator over all of that (P10).
//!
//! ```text
//! magic "kilnrm01" | kind u8 | scheme u8 | subject digest [32]
//! | stored_at u64 | work_nanos u64 | length u64 | payload [length]
//! | authenticator: keyed BLAKE3 [32], or public key [32] + signature [64]
//! ```
//!
//! Integers are little-endian. The authenticator covers every byte before
//! it, so the key (through its digest), the bytes and the work are all
//! signed: an entry copied under another key, cut short, altered or signed
//! by a key this node does not trust never verifies. An Ed25519 signature
//! is over a BLAKE3 digest of those bytes, derived under a context of its
//! own, so a large artifact is hashed once, fast.

use std::time::Duration;

use crate::keys::{Keys, PublicKey};

const MAGIC: &[u8; 8] = b"kilnrm01";
const HEADER: usize = 8 + 1 + 1 + 32 + 8 + 8 + 8;
const SIGNATURE_CONTEXT: &str = "kiln remote entry signature 1";

const KEYED: u8 = 1;
const ED25519: u8 = 2;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An artifact, under a kernel's or a source's key.
    Artifact = 1,
    /// A named blob.
    Blob = 2,
    /// The key a kernel was last stored under (P9).
    History = 3,
    /// The whole key an artifact entry was written under, so that `kiln
    /// pull` can list what the remote holds (its entries carry only the
    /// key's digest).
    Key = 4,
}

impl Kind {
    /// The space of Redis keys entries of this kind live in.
    pub(crate) fn space(self) -> &'static str {
        match self {
            Self::Artifact => "e",
            Self::Blob => "b",
            Self::History => "h",
            Self::Key => "k",
        }
    }
}

/// An entry that verified.
#[derive(Debug)]
pub struct Verified {
    /// The bytes it carries.
    pub payload: Vec<u8>,
    /// When it was written, in seconds since the Unix epoch.
    pub stored_at: u64,
    /// The work its artifact saved.
    pub work: Duration,
}

/// Why an entry was refused: never loaded, a miss (P10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// Not a kiln entry, cut short, or of another kind.
    Malformed(&'static str),
    /// The authenticator does not verify with this node's keys.
    Unverified(&'static str),
    /// A verified entry written for another key.
    ForeignKey,
}

impl Rejection {
    /// The refusal, in words for a log line.
    pub fn detail(&self) -> String {
        match self {
            Self::Malformed(what) => format!("malformed remote entry: {what}"),
            Self::Unverified(what) => format!("remote entry does not verify: {what}"),
            Self::ForeignKey => "remote entry was written for another key".to_owned(),
        }
    }
}

/// The value of an entry of `kind` for `subject`, signed with `keys`, or
/// `None` when `keys` cannot sign (a read-only node).
pub fn seal(
    keys: &Keys,
    kind: Kind,
    subject: &[u8; 32],
    stored_at: u64,
    work: Duration,
    payload: &[u8],
) -> Option<Vec<u8>> {
    let scheme = if keys.signing.is_some() {
        ED25519
    } else if keys.fleet.is_some() {
        KEYED
    } else {
        return None;
    };
    let tag_length = if scheme == ED25519 { 96 } else { 32 };
    let mut value = Vec::with_capacity(HEADER + payload.len() + tag_length);
    value.extend_from_slice(MAGIC);
    value.push(kind as u8);
    value.push(scheme);
    value.extend_from_slice(subject);
    value.extend_from_slice(&stored_at.to_le_bytes());
    let work = u64::try_from(work.as_nanos()).unwrap_or(u64::MAX);
    value.extend_from_slice(&work.to_le_bytes());
    value.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    value.extend_from_slice(payload);
    match (&keys.signing, &keys.fleet) {
        (Some(signing), _) => {
            let signature = signing.sign(&signed_digest(&value));
            value.extend_from_slice(signing.public_key().bytes());
            value.extend_from_slice(&signature);
        }
        (None, Some(fleet)) => {
            let tag = blake3::keyed_hash(fleet.bytes(), &value);
            value.extend_from_slice(tag.as_bytes());
        }
        (None, None) => unreachable!("a scheme was chosen above"),
    }
    Some(value)
}

/// The payload of `value` if it is a whole entry of `kind`, authenticated
/// by a key of `keys`, written for `subject`. Reads nothing out of bounds
/// and allocates no more than `value` holds, whatever `value` is.
///
/// # Errors
///
/// Why the entry is refused: malformed, unverified, or for another key.
pub fn open(
    keys: &Keys,
    kind: Kind,
    subject: &[u8; 32],
    value: &[u8],
) -> Result<Verified, Rejection> {
    if value.len() < HEADER || &value[..8] != MAGIC {
        return Err(Rejection::Malformed("not a kiln entry"));
    }
    if value[8] != kind as u8 {
        return Err(Rejection::Malformed("an entry of another kind"));
    }
    let scheme = value[9];
    let number = |at: usize| {
        u64::from_le_bytes(value[at..at + 8].try_into().expect("eight bytes in bounds"))
    };
    let (stored_at, work, length) = (number(42), number(50), number(58));
    let tag_length = match scheme {
        KEYED => 32,
        ED25519 => 96,
        _ => return Err(Rejection::Malformed("an unknown authenticator")),
    };
    let Some(signed_end) = usize::try_from(length)
        .ok()
        .and_then(|length| HEADER.checked_add(length))
    else {
        return Err(Rejection::Malformed("a length past the end"));
    };
    if signed_end.checked_add(tag_length) != Some(value.len()) {
        return Err(Rejection::Malformed(
            "cut short or with bytes after its end",
        ));
    }
    let (signed, tag) = value.split_at(signed_end);
    match scheme {
        KEYED => {
            let Some(fleet) = &keys.fleet else {
                return Err(Rejection::Unverified(
                    "signed with a fleet key, and this node holds none",
                ));
            };
            let expected = blake3::keyed_hash(fleet.bytes(), signed);
            let found = blake3::Hash::from_bytes(tag.try_into().expect("32 bytes"));
            // `blake3::Hash` compares in constant time.
            if expected != found {
                return Err(Rejection::Unverified(
                    "its fleet-key authenticator does not match",
                ));
            }
        }
        _ => {
            let public = PublicKey::from_bytes(tag[..32].try_into().expect("32 bytes"));
            if !keys.trusts(&public) {
                return Err(Rejection::Unverified(
                    "signed by a key this node does not trust",
                ));
            }
            let signature: [u8; 64] = tag[32..].try_into().expect("64 bytes");
            if !public.verify(&signed_digest(signed), &signature) {
                return Err(Rejection::Unverified(
                    "its Ed25519 signature does not match",
                ));
            }
        }
    }
    if &value[10..42] != subject {
        return Err(Rejection::ForeignKey);
    }
    Ok(Verified {
        payload: value[HEADER..signed_end].to_vec(),
        stored_at,
        work: Duration::from_nanos(work),
    })
}

fn signed_digest(signed: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(SIGNATURE_CONTEXT);
    hasher.update(signed);
    *hasher.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen;

    fn fleet() -> Keys {
        Keys {
            fleet: Some(keygen::fleet_key().unwrap()),
            ..Keys::default()
        }
    }

    fn builder() -> Keys {
        Keys {
            signing: Some(keygen::signing_key().unwrap()),
            ..Keys::default()
        }
    }

    const SUBJECT: [u8; 32] = [7; 32];

    #[test]
    fn a_sealed_entry_opens_with_its_bytes_and_work() {
        // P10
        for keys in [fleet(), builder()] {
            let value = seal(
                &keys,
                Kind::Artifact,
                &SUBJECT,
                5,
                Duration::from_millis(3),
                b"abc",
            )
            .expect("these keys sign");
            let opened = open(&keys, Kind::Artifact, &SUBJECT, &value).expect("it verifies");
            assert_eq!(opened.payload, b"abc");
            assert_eq!(opened.work, Duration::from_millis(3));
            assert_eq!(opened.stored_at, 5);
        }
    }

    #[test]
    fn every_changed_truncated_or_foreign_entry_is_refused() {
        // P10: a flipped bit anywhere, a cut, another key, another kind,
        // another signer: never opened.
        for keys in [fleet(), builder()] {
            let value = seal(
                &keys,
                Kind::Artifact,
                &SUBJECT,
                1,
                Duration::ZERO,
                b"native code",
            )
            .unwrap();
            for index in 0..value.len() {
                let mut forged = value.clone();
                forged[index] ^= 0x20;
                assert!(
                    open(&keys, Kind::Artifact, &SUBJECT, &forged).is_err(),
                    "byte {index}"
                );
            }
            for length in 0..value.len() {
                assert!(open(&keys, Kind::Artifact, &SUBJECT, &value[..length]).is_err());
            }
            assert_eq!(
                open(&keys, Kind::Artifact, &[8; 32], &value).unwrap_err(),
                Rejection::ForeignKey
            );
            assert!(open(&keys, Kind::Blob, &SUBJECT, &value).is_err());
            let stranger = if keys.fleet.is_some() {
                fleet()
            } else {
                builder()
            };
            assert!(matches!(
                open(&stranger, Kind::Artifact, &SUBJECT, &value),
                Err(Rejection::Unverified(_))
            ));
        }
    }

    #[test]
    fn a_node_with_public_keys_verifies_and_cannot_seal() {
        // P10: nodes hold only trusted public keys; builders sign.
        let builder = builder();
        let node = Keys {
            trusted: vec![builder.signing.as_ref().unwrap().public_key()],
            ..Keys::default()
        };
        assert!(seal(&node, Kind::Artifact, &SUBJECT, 0, Duration::ZERO, b"x").is_none());
        let value = seal(&builder, Kind::Artifact, &SUBJECT, 0, Duration::ZERO, b"x").unwrap();
        assert!(open(&node, Kind::Artifact, &SUBJECT, &value).is_ok());
    }
}
