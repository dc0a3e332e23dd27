//! The small files that point at objects: records (one per key) and kernel
//! histories (one per kernel id). Both carry every component of their keys
//! in the clear, so a record read under one key can be told from a record of
//! another (P2), and a miss can name what changed (P9).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_core::StoreKey;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::envelope;

const RECORD_TAG: &[u8; 8] = b"kilnrec1";
const HISTORY_TAG: &[u8; 8] = b"kilnhis1";
const TARGETS_TAG: &[u8; 8] = b"kilntgt1";

/// What the store keeps under one key: the full key and the object it
/// points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Every component of the key it was written for.
    pub key: StoreKey,
    /// The BLAKE3 digest of the object's bytes.
    pub object: [u8; 32],
    /// The object's length in bytes.
    pub size: u64,
    /// How long compiling the artifact took, in nanoseconds: what a hit saves.
    pub work_nanos: u64,
    /// When it was stored, in seconds since the Unix epoch.
    pub stored_at: u64,
}

impl Record {
    /// A record of `key` pointing at `bytes`' object.
    pub(crate) fn new(key: StoreKey, object: [u8; 32], size: u64, work: Duration) -> Self {
        Self {
            key,
            object,
            size,
            work_nanos: u64::try_from(work.as_nanos()).unwrap_or(u64::MAX),
            stored_at: now_seconds(),
        }
    }

    /// How long compiling it took.
    pub fn work(&self) -> Duration {
        Duration::from_nanos(self.work_nanos)
    }

    pub(crate) fn seal(&self) -> Vec<u8> {
        seal(RECORD_TAG, self)
    }

    pub(crate) fn open(sealed: &[u8]) -> Result<Self, String> {
        open(RECORD_TAG, sealed)
    }
}

/// A key and when it was seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The key.
    pub key: StoreKey,
    /// When, in seconds since the Unix epoch.
    pub at: u64,
}

/// What the store knows of one kernel id across keys: the key it last
/// stored the kernel under, and the key it was last asked for and missed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelHistory {
    /// The kernel's name.
    pub name: String,
    /// The kernel id's digest.
    pub digest: u128,
    /// The latest key the kernel was stored under.
    pub stored: Option<Seen>,
    /// The latest key a lookup of the kernel missed under.
    pub asked: Option<Seen>,
    /// What [`stored`](Self::stored) was when that lookup missed: comparing
    /// the two names what changed (P9).
    pub held_at_miss: Option<Seen>,
}

impl KernelHistory {
    pub(crate) fn seal(&self) -> Vec<u8> {
        seal(HISTORY_TAG, self)
    }

    pub(crate) fn open(sealed: &[u8]) -> Result<Self, String> {
        open(HISTORY_TAG, sealed)
    }
}

/// The targets file: the key components of every compiler that stored here.
pub(crate) fn seal_targets(targets: &[kiln_core::KeyComponents]) -> Vec<u8> {
    seal(TARGETS_TAG, targets)
}

pub(crate) fn open_targets(sealed: &[u8]) -> Result<Vec<kiln_core::KeyComponents>, String> {
    open(TARGETS_TAG, sealed)
}

pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .expect("the store's own types always serialize")
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
        Ok((value, read)) if read == bytes.len() => Ok(value),
        Ok(_) => Err("bytes left over after the payload".into()),
        Err(error) => Err(format!("does not decode: {error}")),
    }
}

fn seal<T: Serialize + ?Sized>(tag: &[u8; 8], value: &T) -> Vec<u8> {
    envelope::seal(tag, &encode(value))
}

fn open<T: DeserializeOwned>(tag: &[u8; 8], sealed: &[u8]) -> Result<T, String> {
    decode(envelope::open(tag, sealed)?)
}

/// Seconds since the Unix epoch.
pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}
