//! A lease's value (P12): the holder's word, authenticated like an entry.
//!
//! ```text
//! kiln-lease-3 TOKEN PID UNTIL AUTH HOST     a held lease
//! kiln-free-3 TOKEN AUTH                     that lease, let go
//! ```
//!
//! `TOKEN` is random per claim (release and renewal find their own lease
//! by it), `UNTIL` the holder's wall clock in milliseconds when its word
//! runs out (renewals write a later one), `HOST` the rest of the line, for
//! people. `AUTH` covers the claim's key digest and every other word: `k`
//! and a keyed BLAKE3 with the fleet key, or `s`, the signer's public key
//! and an Ed25519 signature. Someone who can write Redis without the key
//! can delete a lease or write garbage in its place, never forge one, and
//! a copied lease holds for one key, until its `UNTIL`.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use kiln_engine::store::hex;

use crate::keys::{Keys, PublicKey};

const HELD: &str = "kiln-lease-3";
const FREE: &str = "kiln-free-3";
const CONTEXT: &str = "kiln remote lease 3";

/// What a value found under a claim's key says, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Word {
    /// A verified lease.
    Held {
        token: String,
        pid: u32,
        /// The holder's clock, in milliseconds since the epoch, when it
        /// runs out unless renewed.
        until: u64,
        host: String,
    },
    /// A verified release of the lease `token`.
    Free { token: String },
    /// Anything else: not kiln's, another version's, or not verifying
    /// with this node's keys. Never honoured.
    Void,
}

/// The value of a lease `token` held by `pid` on `host` until `until`, for
/// the claim of `subject`; `None` when `keys` cannot sign.
pub(crate) fn held(
    keys: &Keys,
    subject: &[u8; 32],
    token: &str,
    pid: u32,
    until: u64,
    host: &str,
) -> Option<String> {
    let signed = format!("{HELD} {token} {pid} {until} {host}");
    let auth = authenticate(keys, subject, &signed)?;
    Some(format!("{HELD} {token} {pid} {until} {auth} {host}"))
}

/// The value that says the lease `token` of `subject` was let go.
pub(crate) fn free(keys: &Keys, subject: &[u8; 32], token: &str) -> Option<String> {
    let signed = format!("{FREE} {token}");
    let auth = authenticate(keys, subject, &signed)?;
    Some(format!("{FREE} {token} {auth}"))
}

/// What every value of lease `token` starts with, renewed or let go
/// aside: what the scripts compare.
pub(crate) fn prefix(token: &str) -> String {
    format!("{HELD} {token} ")
}

/// Checks `value` found under the claim of `subject`.
pub(crate) fn read(keys: &Keys, subject: &[u8; 32], value: &[u8]) -> Word {
    let Ok(value) = std::str::from_utf8(value) else {
        return Word::Void;
    };
    let mut words = value.splitn(6, ' ');
    match words.next() {
        Some(HELD) => {
            let (Some(token), Some(pid), Some(until), Some(auth), Some(host)) = (
                words.next(),
                words.next(),
                words.next(),
                words.next(),
                words.next(),
            ) else {
                return Word::Void;
            };
            let (Ok(pid), Ok(until)) = (pid.parse::<u32>(), until.parse::<u64>()) else {
                return Word::Void;
            };
            let signed = format!("{HELD} {token} {pid} {until} {host}");
            if !verifies(keys, subject, &signed, auth) {
                return Word::Void;
            }
            Word::Held {
                token: token.to_owned(),
                pid,
                until,
                host: host.to_owned(),
            }
        }
        Some(FREE) => {
            let (Some(token), Some(auth), None) = (words.next(), words.next(), words.next()) else {
                return Word::Void;
            };
            if !verifies(keys, subject, &format!("{FREE} {token}"), auth) {
                return Word::Void;
            }
            Word::Free {
                token: token.to_owned(),
            }
        }
        _ => Word::Void,
    }
}

fn message(subject: &[u8; 32], signed: &str) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(CONTEXT);
    hasher.update(subject);
    hasher.update(signed.as_bytes());
    *hasher.finalize().as_bytes()
}

fn authenticate(keys: &Keys, subject: &[u8; 32], signed: &str) -> Option<String> {
    let message = message(subject, signed);
    match (&keys.signing, &keys.fleet) {
        (Some(signing), _) => Some(format!(
            "s{}{}",
            hex(signing.public_key().bytes()),
            hex(&signing.sign(&message))
        )),
        (None, Some(fleet)) => Some(format!(
            "k{}",
            hex(blake3::keyed_hash(fleet.bytes(), &message).as_bytes())
        )),
        (None, None) => None,
    }
}

fn verifies(keys: &Keys, subject: &[u8; 32], signed: &str, auth: &str) -> bool {
    let message = message(subject, signed);
    if let Some(tag) = auth.strip_prefix('k') {
        let (Some(fleet), Some(tag)) = (&keys.fleet, unhex::<32>(tag)) else {
            return false;
        };
        // `blake3::Hash` compares in constant time.
        return blake3::keyed_hash(fleet.bytes(), &message) == blake3::Hash::from_bytes(tag);
    }
    let Some(rest) = auth.strip_prefix('s') else {
        return false;
    };
    let (Some(public), Some(signature)) = (
        rest.get(..64).and_then(unhex::<32>),
        rest.get(64..).and_then(unhex::<64>),
    ) else {
        return false;
    };
    let public = PublicKey::from_bytes(public);
    keys.trusts(&public) && public.verify(&message, &signature)
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != N * 2 || !text.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; N];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(bytes)
}

/// Verified leases of other holders this store saw, by claim digest:
/// honoured until their word runs out even if the key is deleted.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    leases: Mutex<HashMap<[u8; 32], SeenLease>>,
}

/// A verified lease of another holder: its token and until when it is
/// honoured.
#[derive(Debug)]
struct SeenLease {
    token: String,
    until: Instant,
}

/// How many leases of others a store remembers.
const REMEMBERED_LEASES: usize = 1 << 16;

impl Seen {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], SeenLease>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The token of a lease of `subject` honoured now, if any.
    pub(crate) fn honoured(&self, subject: &[u8; 32]) -> Option<String> {
        let mut leases = self.lock();
        match leases.get(subject) {
            Some(seen) if Instant::now() < seen.until => Some(seen.token.clone()),
            Some(_) => {
                leases.remove(subject);
                None
            }
            None => None,
        }
    }

    pub(crate) fn remember(&self, subject: [u8; 32], token: String, until: Instant) {
        let mut leases = self.lock();
        if leases.len() >= REMEMBERED_LEASES {
            // Forgetting costs at most a duplicate compile.
            leases.retain(|_, seen| Instant::now() < seen.until);
        }
        if leases.len() < REMEMBERED_LEASES {
            leases.insert(subject, SeenLease { token, until });
        }
    }

    pub(crate) fn forget(&self, subject: &[u8; 32], token: &str) {
        let mut leases = self.lock();
        if leases.get(subject).is_some_and(|seen| seen.token == token) {
            leases.remove(subject);
        }
    }
}

/// The longest host name a claim's value carries.
const HOST_LENGTH: usize = 255;

/// `host` trimmed, its control characters (and the invisible ones that
/// reorder or hide text) dropped, cut to [`HOST_LENGTH`] bytes: what a
/// claim's value may carry of it, and what is shown of another machine's.
pub(crate) fn printable_host(host: &str) -> String {
    let mut printable = String::new();
    for character in host
        .trim()
        .chars()
        .filter(|character| !kiln_engine::loader::is_hidden(*character))
    {
        if printable.len() + character.len_utf8() > HOST_LENGTH {
            break;
        }
        printable.push(character);
    }
    printable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen;

    const SUBJECT: [u8; 32] = [3; 32];

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

    #[test]
    fn p12_a_lease_verifies_for_its_key_only_and_nothing_forged_does() {
        for keys in [fleet(), builder()] {
            let value = held(&keys, &SUBJECT, "ab12", 42, 1_000, "build 3").unwrap();
            assert_eq!(
                read(&keys, &SUBJECT, value.as_bytes()),
                Word::Held {
                    token: "ab12".into(),
                    pid: 42,
                    until: 1_000,
                    host: "build 3".into()
                }
            );
            // Another key's claim, another node's keys, any changed byte.
            assert_eq!(read(&keys, &[4; 32], value.as_bytes()), Word::Void);
            let stranger = if keys.fleet.is_some() {
                fleet()
            } else {
                builder()
            };
            assert_eq!(read(&stranger, &SUBJECT, value.as_bytes()), Word::Void);
            for index in 0..value.len() {
                let mut forged = value.clone().into_bytes();
                forged[index] ^= 0x01;
                assert!(
                    !matches!(read(&keys, &SUBJECT, &forged), Word::Held { .. }),
                    "byte {index}"
                );
            }
            let freed = free(&keys, &SUBJECT, "ab12").unwrap();
            assert_eq!(
                read(&keys, &SUBJECT, freed.as_bytes()),
                Word::Free {
                    token: "ab12".into()
                }
            );
            assert!(value.starts_with(&prefix("ab12")));
        }
        // What an earlier version wrote, or anyone without the key.
        for foreign in [
            "kiln-lease-2 00ff 4242 build-3",
            "build-3 pid 4242 a1b2",
            "kiln-lease-3 ab 1 99999999999999 k00 attacker",
            "kiln-free-3 ab k00",
        ] {
            assert_eq!(read(&fleet(), &SUBJECT, foreign.as_bytes()), Word::Void);
        }
    }
}
