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
//!
//! # Files
//!
//! `format.rs` is what a bundle file is made of (tags, versions, limits,
//! its header and manifest), `reports.rs` what the passes hand back and
//! take, and `transfer/` the passes: writing a bundle, reading its head and
//! its sections, and publishing what it holds.

mod format;
mod reports;
mod transfer;

#[cfg(test)]
mod bombs;
#[cfg(test)]
mod tests;

pub use format::{BUNDLE_VERSION, BundleHeader};
pub use reports::{BundleSeal, ExportReport, ImportReport, SignBundle};
pub use transfer::read_header;
