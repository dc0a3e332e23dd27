//! What a bundle file is made of, shared by what writes and what reads
//! one: its tags, versions and limits, its header and manifest, and how
//! damage to it is named.

use kiln_engine::store::hex;
use kiln_engine::{KeyComponent, KeyComponents, STORE_FORMAT};
use serde::{Deserialize, Serialize};

use crate::error::Error;

pub(super) const MAGIC: &[u8; 8] = b"kilnbndl";
/// The bundle format this version writes: a signed manifest, then the
/// plain form (version 1) in a zstd stream. It reads versions 1 to 3.
pub const BUNDLE_VERSION: u32 = 3;
/// A bare zstd stream of the plain form after the magic and the version,
/// without a manifest: read, bounded, never written.
pub(super) const STREAM_VERSION: u32 = 2;
/// How many times its own length a version 2 bundle may inflate to: real
/// bundles compress about twentyfold.
pub(super) const STREAM_RATIO: u64 = 1024;
pub(super) const MANIFEST_TAG: &[u8; 8] = b"kilnmft1";
/// The uncompressed form, which a compressed bundle holds and which
/// bundles were before version 2.
pub(super) const PLAIN_VERSION: u32 = 1;
/// zstd's default level: artifacts compress about twentyfold at it, at
/// hundreds of MB/s, and higher levels gain little on kernels.
pub(super) const COMPRESSION_LEVEL: i32 = 3;
pub(super) const HEADER_TAG: &[u8; 8] = b"kilnhdr1";
/// The largest object a bundle may hold: anything larger is damage.
pub(super) const LARGEST_OBJECT: u64 = 4 << 30;
/// The largest sealed header or record a bundle may hold.
pub(super) const LARGEST_SEALED: u64 = 1 << 20;
/// How much of an object import holds in memory at once: objects stream
/// through one buffer of this size, whatever their length.
pub(super) const CHUNK: usize = 256 << 10;
/// Bytes of the closing section after its tag.
pub(super) const END_LENGTH: usize = 48;
/// What starts a bundle's signature.
pub(super) const SIGNATURE_TAG: &[u8; 8] = b"kilnsig1";
/// The largest signature a bundle may carry.
pub(super) const LARGEST_SIGNATURE: u32 = 4096;

/// What a bundle says it was built for: the components its entries share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleHeader {
    /// [`STORE_FORMAT`] of its records.
    pub store_format: u32,
    /// The compiler its entries were built by.
    pub components: KeyComponents,
    /// When it was exported, in seconds since the Unix epoch.
    pub created_at: u64,
}

impl BundleHeader {
    /// The first component in which the bundle differs from what a store
    /// `expected`, among those P8 names: format, backend, compiler,
    /// architecture.
    pub fn mismatch(&self, expected: &KeyComponents) -> Option<Error> {
        let differs = |component, bundle: &str, expected: &str| {
            Some(Error::ForeignBundle {
                component,
                bundle: bundle.to_owned(),
                expected: expected.to_owned(),
            })
        };
        let ours = &self.components;
        if self.store_format != STORE_FORMAT {
            return differs(
                KeyComponent::Format,
                &self.store_format.to_string(),
                &STORE_FORMAT.to_string(),
            );
        }
        if ours.backend != expected.backend {
            return differs(KeyComponent::Backend, &ours.backend, &expected.backend);
        }
        if ours.compiler != expected.compiler {
            return differs(KeyComponent::Compiler, &ours.compiler, &expected.compiler);
        }
        if ours.architecture != expected.architecture {
            return differs(
                KeyComponent::Architecture,
                &ours.architecture,
                &expected.architecture,
            );
        }
        None
    }
}

/// What a version 3 bundle's manifest says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(in crate::bundle) struct Manifest {
    /// The header of the plain form the stream holds.
    pub(in crate::bundle) header: BundleHeader,
    /// Bytes of the plain form the stream decompresses to.
    pub(in crate::bundle) plain_length: u64,
    /// Bytes of the compressed stream after the signature.
    pub(in crate::bundle) stream_length: u64,
    /// BLAKE3 of the compressed stream.
    pub(in crate::bundle) stream_digest: [u8; 32],
}

/// The first bytes of a digest, in hex: enough to tell objects apart in a
/// message.
pub(super) fn short(digest: &[u8; 32]) -> String {
    hex(&digest[..8])
}

pub(super) fn damaged(detail: String) -> Error {
    Error::DamagedBundle { detail }
}
