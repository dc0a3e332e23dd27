//! Bundles (P8): a whole store in one file, to warm another machine ahead of
//! time.
//!
//! A bundle file (version 3) is a head that says what follows, then a zstd
//! stream of the plain form below, version 1, whole:
//!
//! ```text
//! "kilnbndl"  u32 3
//! manifest    u32 length, sealed: the plain form's header, its length, the
//!             stream's length and BLAKE3 digest
//! signature   "kilnsig1" length:u32 bytes  (length 0: unsigned)
//! stream      zstd of the plain form (its length is the manifest's)
//! ```
//!
//! Import reads the manifest and the signature first, refuses a bundle of
//! another compiler, one whose plain form is over the store's size limit,
//! a stream whose digest is not the manifest's and a signature the caller
//! does not trust, all before it decompresses a byte; then it decompresses
//! into a file without a name in the store's staging folder, at most the
//! length the manifest gives: a stream that inflates past it is refused
//! there (a decompression bomb stages no more than its manifest says). The
//! staged file is read twice and is gone once the import ends, however it
//! ends. A version 2 file (written before the manifest: the magic, the
//! version and a bare stream) still imports, decompressed to at most the
//! store's size limit and 1024 times its own length; a version 1 file (the
//! plain form, uncompressed) imports as it is.
//!
//! ```text
//! "kilnbndl"  u32 1
//! header      sealed: store format, backend, compiler, architecture, options
//! objects     'O' digest[32] length:u64 bytes          (repeated)
//! records     'R' length:u32 sealed record             (repeated)
//! blobs       'B' length:u32 sealed blob record        (repeated, P15)
//! end         'E' objects:u64 records:u64 digest[32]   (BLAKE3 of all up to 'E')
//! signature   "kilnsig1" length:u32 bytes              (optional; not in a version 3 stream)
//! ```
//!
//! Objects come before the records that point at them, so an import that
//! stops half-way leaves objects without records (which eviction ages out),
//! never records without objects.
//!
//! # Trust
//!
//! A bundle is checksummed, and signed when its exporter holds a key: a
//! version 3 bundle's signature covers its sealed manifest, which holds the
//! digest of the stream, so it covers every byte; an older bundle's
//! optional signature after the end section authenticates the end section
//! (`'E'`, the counts and the closing digest, which covers every byte
//! before it). This crate neither makes nor checks signatures: the caller
//! of [`DiskStore::export_signed`] makes them and the caller of
//! [`DiskStore::import_checked`] judges them (the command line uses the
//! remote tier's keys), so that the checksums below are what binds the
//! signature to the content. Without a signature, whoever can write a
//! bundle can make every digest in it agree, and importing it is trusting
//! its author with native code; bundles written before signatures existed
//! have none, and read as unsigned. Import reads the bundle twice. The first pass publishes nothing:
//! it checks every length against what is left of the file before reading
//! or allocating anything, streams each object through a fixed buffer to
//! check its digest, checks every record's seal and that its key is of the
//! header's compiler, and the closing digest. Then it checks what each
//! record says about its object: that the bundle or the store holds an
//! object of that digest and size, and, when the record's key names an
//! entry point, that the object's bytes contain that name. Only a bundle
//! that passes all of it is published, in the second pass, which checks
//! every entry again as it goes. It cannot check that an object is what
//! compiling the key's source would give, nor which kernel or architecture
//! the bytes are for when the key has no entry point (the CUDA, HIP and
//! wgpu backends fold it into the kernel id): a record re-sealed to name
//! another kernel's artifact of the same compiler is imported then.
//!
//! Records travel as pointer records: a record that carries its artifact's
//! bytes in the store (inline) is written without them, since the bundle
//! holds the object anyway, and import makes the inline form again from
//! the object it has just published.

use crate::usage::{Delta, file_allocation};
use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use kiln_engine::store::hex;
use kiln_engine::{KeyComponent, KeyComponents, STORE_FORMAT};
use serde::{Deserialize, Serialize};

use crate::disk::{DiskStore, not_yet_refreshed, touch};
use crate::durable;
use crate::envelope;
use crate::error::{Error, Result};
use crate::lock::{Mode, object_slot};
use crate::maintenance::Progress;
use crate::partial::PartialFile;
use crate::record::{self, Record};
use crate::record::{digest, is_inlined};
use crate::walk::digest_from_name;

#[cfg(test)]
mod bombs;
mod export;
mod format;
mod import;
mod manifest;
mod reader;
#[cfg(test)]
mod tests;

pub use format::read_header;
use format::{read_head, read_header_sealed};
use reader::{Next, SectionReader, scan};

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

/// Makes a bundle's signature from the bytes it covers
/// ([`BundleSeal::signed`]).
pub type SignBundle<'a> = &'a dyn Fn(&[u8]) -> Vec<u8>;

/// What a bundle's signature covers, and the signature, handed to the
/// judge of [`DiskStore::import_checked`] once every checksum of the
/// bundle held.
#[derive(Debug, Clone, Copy)]
pub struct BundleSeal<'a> {
    /// The end section, tag included: `'E'`, the counts and the closing
    /// digest of every byte before it. A signature over these bytes covers
    /// the whole bundle.
    pub signed: &'a [u8],
    /// The signature the bundle carries, if any.
    pub signature: Option<&'a [u8]>,
}

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

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportReport {
    /// Objects written.
    pub objects: u64,
    /// Records written.
    pub records: u64,
    /// Named blobs written (P15): tuning answers, warm-start profiles,
    /// pipeline caches.
    #[serde(default)]
    pub blobs: u64,
    /// Bytes of the bundle.
    pub bytes: u64,
    /// Objects skipped because they did not verify.
    pub skipped: u64,
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportReport {
    /// Objects in the bundle.
    pub objects: u64,
    /// Of those, objects the store did not have.
    pub new_objects: u64,
    /// Records in the bundle.
    pub records: u64,
    /// Of those, records that replaced a record pointing elsewhere: the
    /// store's generation moved (L10).
    pub replaced: u64,
    /// Named blobs in the bundle (P15).
    #[serde(default)]
    pub blobs: u64,
}

/// The first bytes of a digest, in hex: enough to tell objects apart in a
/// message.
pub(super) fn short(digest: &[u8; 32]) -> String {
    hex(&digest[..8])
}

pub(super) fn damaged(detail: String) -> Error {
    Error::DamagedBundle { detail }
}
