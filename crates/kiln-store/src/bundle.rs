//! Bundles (P8): a whole store in one file, to warm another machine ahead of
//! time.
//!
//! A bundle file is `"kilnbndl"`, a `u32` version 2, and a zstd stream
//! whose content is the plain form below, version 1, whole: the checksums
//! and the signature are those of the plain form, so one reader checks
//! both, and a version 1 file (written before bundles were compressed)
//! still imports. Import decompresses into a file without a name in the
//! store's staging folder, which it reads twice and which is gone once
//! the import ends, however it ends.
//!
//! ```text
//! "kilnbndl"  u32 1
//! header      sealed: store format, backend, compiler, architecture, options
//! objects     'O' digest[32] length:u64 bytes          (repeated)
//! records     'R' length:u32 sealed record             (repeated)
//! end         'E' objects:u64 records:u64 digest[32]   (BLAKE3 of all up to 'E')
//! signature   "kilnsig1" length:u32 bytes              (optional)
//! ```
//!
//! Objects come before the records that point at them, so an import that
//! stops half-way leaves objects without records (which eviction ages out),
//! never records without objects.
//!
//! # Trust
//!
//! A bundle is checksummed, and signed when its exporter holds a key: the
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

use crate::disk::{DiskStore, digest, is_inlined, not_yet_refreshed, touch};
use crate::durable;
use crate::envelope;
use crate::error::{Error, Result};
use crate::layout::digest_from_name;
use crate::lock::{Mode, object_slot};
use crate::maintenance::Progress;
use crate::partial::PartialFile;
use crate::record::{self, Record};

const MAGIC: &[u8; 8] = b"kilnbndl";
/// The bundle format this version writes: version 1, the plain form, in a
/// zstd stream.
/// It reads both.
pub const BUNDLE_VERSION: u32 = 2;
/// The uncompressed form, which a compressed bundle holds and which
/// bundles were before version 2.
const PLAIN_VERSION: u32 = 1;
/// zstd's default level: artifacts compress about twentyfold at it, at
/// hundreds of MB/s, and higher levels gain little on kernels.
const COMPRESSION_LEVEL: i32 = 3;
const HEADER_TAG: &[u8; 8] = b"kilnhdr1";
/// The largest object a bundle may hold: anything larger is damage.
const LARGEST_OBJECT: u64 = 4 << 30;
/// The largest sealed header or record a bundle may hold.
const LARGEST_SEALED: u64 = 1 << 20;
/// How much of an object import holds in memory at once: objects stream
/// through one buffer of this size, whatever their length.
const CHUNK: usize = 256 << 10;
/// Bytes of the closing section after its tag.
const END_LENGTH: usize = 48;
/// What starts a bundle's signature.
const SIGNATURE_TAG: &[u8; 8] = b"kilnsig1";
/// The largest signature a bundle may carry.
const LARGEST_SIGNATURE: u32 = 4096;

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
}

/// A writer that digests what goes through it.
struct Digesting<W> {
    inner: W,
    hasher: blake3::Hasher,
    written: u64,
}

impl<W: Write> Write for Digesting<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.hasher.update(&bytes[..written]);
        self.written += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Where a bundle's plain form goes: the file, or a zstd stream into it
/// after the compressed form's magic and version.
enum Sink<'a> {
    Plain(BufWriter<&'a File>),
    Compressed(zstd::stream::write::Encoder<'static, BufWriter<&'a File>>),
}

impl<'a> Sink<'a> {
    fn new(mut file: BufWriter<&'a File>, compressed: bool) -> io::Result<Self> {
        if !compressed {
            return Ok(Self::Plain(file));
        }
        file.write_all(MAGIC)?;
        file.write_all(&BUNDLE_VERSION.to_le_bytes())?;
        let mut encoder = zstd::stream::write::Encoder::new(file, COMPRESSION_LEVEL)?;
        // Damage to the stream is then named as such, before the plain
        // form's own digests would catch it.
        encoder.include_checksum(true)?;
        Ok(Self::Compressed(encoder))
    }

    /// Ends the zstd stream, if any: the buffered file, still to flush.
    fn finish(self) -> io::Result<BufWriter<&'a File>> {
        match self {
            Self::Plain(file) => Ok(file),
            Self::Compressed(encoder) => encoder.finish(),
        }
    }
}

impl Write for Sink<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(file) => file.write(bytes),
            Self::Compressed(encoder) => encoder.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(file) => file.flush(),
            Self::Compressed(encoder) => encoder.flush(),
        }
    }
}

/// What streaming an object into the store failed with: reading the
/// bundle (or writing what it read), or publishing the file.
enum Streamed {
    Reading(Error),
    Publishing(io::Error),
}

impl From<io::Error> for Streamed {
    fn from(error: io::Error) -> Self {
        Self::Publishing(error)
    }
}

impl DiskStore {
    /// Writes every entry built by the compiler with `components` — or, when
    /// `None`, by the one compiler the store holds entries of — to a bundle
    /// at `path`. Streams: one object in memory at a time.
    ///
    /// Every object of the store goes in, whichever compiler it belongs to:
    /// telling them apart would need a set of every digest in memory, and
    /// an object no record points at costs the importer only disk space
    /// until eviction.
    ///
    /// The bundle is written to a new file of its own beside `path` and
    /// renamed over it: no other file is opened, written or removed, and a
    /// link at `path` is replaced, not followed.
    ///
    /// # Errors
    ///
    /// The store holds several compilers' entries and none was chosen, or
    /// none at all; or a file could not be read or written.
    pub fn export(
        &self,
        path: &Path,
        components: Option<&KeyComponents>,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ExportReport> {
        self.export_signed(path, components, progress, None)
    }

    /// As [`export`](Self::export), and when `sign` is given, the bundle
    /// ends with the signature `sign` makes of its end section (see
    /// [`BundleSeal::signed`]).
    ///
    /// # Errors
    ///
    /// As [`export`](Self::export); a signature of more than 4096 bytes
    /// is refused.
    pub fn export_signed(
        &self,
        path: &Path,
        components: Option<&KeyComponents>,
        progress: &mut dyn FnMut(&Progress),
        sign: Option<SignBundle<'_>>,
    ) -> Result<ExportReport> {
        let components = match components {
            Some(components) => components.clone(),
            None => {
                let mut targets = self.targets();
                match targets.len() {
                    0 => return Err(Error::NothingToExport),
                    1 => targets.remove(0),
                    _ => {
                        return Err(Error::AmbiguousExport {
                            choices: targets.iter().map(ToString::to_string).collect(),
                        });
                    }
                }
            }
        };
        let partial = PartialFile::beside(path).map_err(Error::io("create a file beside", path))?;
        // Dropping `partial` on any way out below removes it.
        let report = self.write_bundle(partial.file(), &components, progress, sign, true)?;
        if report.records == 0 {
            return Err(Error::NothingToExport);
        }
        partial
            .rename_over(path)
            .map_err(Error::io("write", path))?;
        Ok(report)
    }

    fn write_bundle(
        &self,
        file: &File,
        components: &KeyComponents,
        progress: &mut dyn FnMut(&Progress),
        sign: Option<SignBundle<'_>>,
        compressed: bool,
    ) -> Result<ExportReport> {
        let inner = &self.inner;
        let failed = |error| Error::Io {
            action: "write the bundle",
            path: inner.layout.root().to_path_buf(),
            source: error,
        };
        let mut out = Digesting {
            inner: Sink::new(BufWriter::with_capacity(1 << 20, file), compressed)
                .map_err(failed)?,
            hasher: blake3::Hasher::new(),
            written: 0,
        };
        let header = BundleHeader {
            store_format: STORE_FORMAT,
            components: components.clone(),
            created_at: record::now_seconds(),
        };
        let sealed_header = envelope::seal(HEADER_TAG, &record::encode(&header));
        out.write_all(MAGIC)
            .and_then(|()| out.write_all(&PLAIN_VERSION.to_le_bytes()))
            .and_then(|()| out.write_all(&(sealed_header.len() as u32).to_le_bytes()))
            .and_then(|()| out.write_all(&sealed_header))
            .map_err(failed)?;

        let mut report = ExportReport::default();
        let mut write_error = None;
        let root = inner.layout.root();
        let estimate = inner.usage.read().entries;
        crate::maintenance::walk_files(root, "objects", &mut |path, name| {
            if write_error.is_some() {
                return;
            }
            let Some(expected) = digest_from_name(name) else {
                return;
            };
            let Ok(Some(_pin)) = inner
                .locks
                .acquire(object_slot(&expected), Mode::Shared, None)
            else {
                return;
            };
            let Ok(bytes) = fs::read(&path) else {
                return;
            };
            if bytes.is_empty() || digest(&bytes) != expected {
                report.skipped += 1;
                return;
            }
            let result = out
                .write_all(b"O")
                .and_then(|()| out.write_all(&expected))
                .and_then(|()| out.write_all(&(bytes.len() as u64).to_le_bytes()))
                .and_then(|()| out.write_all(&bytes));
            match result {
                Ok(()) => report.objects += 1,
                Err(error) => write_error = Some(error),
            }
            progress(&Progress {
                phase: "objects",
                done: report.objects,
                total: Some(estimate),
                bytes: out.written,
            });
        })?;
        // Packed objects travel as the files do.
        self.each_packed(crate::pack::Kind::Object, &mut |bytes| {
            if write_error.is_some() {
                return;
            }
            let expected = digest(bytes);
            let result = out
                .write_all(b"O")
                .and_then(|()| out.write_all(&expected))
                .and_then(|()| out.write_all(&(bytes.len() as u64).to_le_bytes()))
                .and_then(|()| out.write_all(bytes));
            match result {
                Ok(()) => report.objects += 1,
                Err(error) => write_error = Some(error),
            }
        });
        let mut packed_records = Vec::new();
        self.each_packed(crate::pack::Kind::Record, &mut |sealed| {
            if let Ok((record, _)) = Record::open_any(sealed)
                && record.key.format == STORE_FORMAT
                && record.key.components == *components
            {
                packed_records.push(record.seal());
            }
        });
        for sealed in packed_records {
            if write_error.is_some() {
                break;
            }
            let result = out
                .write_all(b"R")
                .and_then(|()| out.write_all(&(sealed.len() as u32).to_le_bytes()))
                .and_then(|()| out.write_all(&sealed));
            match result {
                Ok(()) => report.records += 1,
                Err(error) => write_error = Some(error),
            }
        }
        crate::maintenance::walk_files(root, "records", &mut |path, _| {
            if write_error.is_some() {
                return;
            }
            let Ok(sealed) = fs::read(&path) else {
                return;
            };
            let Ok((record, inline)) = Record::open_any(&sealed) else {
                return;
            };
            if record.key.format != STORE_FORMAT || record.key.components != *components {
                return;
            }
            let sealed = if inline.is_some() {
                record.seal()
            } else {
                sealed
            };
            let result = out
                .write_all(b"R")
                .and_then(|()| out.write_all(&(sealed.len() as u32).to_le_bytes()))
                .and_then(|()| out.write_all(&sealed));
            match result {
                Ok(()) => report.records += 1,
                Err(error) => write_error = Some(error),
            }
            progress(&Progress {
                phase: "records",
                done: report.records,
                total: None,
                bytes: out.written,
            });
        })?;
        if let Some(error) = write_error {
            return Err(failed(error));
        }
        out.write_all(b"E").map_err(failed)?;
        let total = *out.hasher.finalize().as_bytes();
        let mut end = Vec::with_capacity(END_LENGTH);
        end.extend_from_slice(&report.objects.to_le_bytes());
        end.extend_from_slice(&report.records.to_le_bytes());
        end.extend_from_slice(&total);
        out.write_all(&end).map_err(failed)?;
        if let Some(sign) = sign {
            let mut signed = Vec::with_capacity(1 + END_LENGTH);
            signed.push(b'E');
            signed.extend_from_slice(&end);
            let signature = sign(&signed);
            let length = u32::try_from(signature.len())
                .ok()
                .filter(|length| *length <= LARGEST_SIGNATURE)
                .ok_or_else(|| {
                    failed(io::Error::other(format!(
                        "a signature of {} bytes is over the limit of {LARGEST_SIGNATURE}",
                        signature.len()
                    )))
                })?;
            out.write_all(SIGNATURE_TAG)
                .and_then(|()| out.write_all(&length.to_le_bytes()))
                .and_then(|()| out.write_all(&signature))
                .map_err(failed)?;
        }
        let file = out
            .inner
            .finish()
            .map_err(failed)?
            .into_inner()
            .map_err(|error| failed(error.into_error()))?;
        file.sync_all().map_err(failed)?;
        report.bytes = file.metadata().map_err(failed)?.len();
        Ok(report)
    }

    /// Verifies the bundle at `path` whole, refuses it when it was built for
    /// another compiler than `expected` (naming the component that differs),
    /// checks that every record's object is what the record says (see the
    /// module's "Trust"), then publishes every entry. An entry that replaces
    /// one pointing at other bytes moves the store's generation (L10).
    /// Memory stays bounded by one chunk of an object and one record,
    /// however large the bundle's objects, plus a digest per object and per
    /// record.
    ///
    /// # Errors
    ///
    /// The file is not a bundle, is damaged, is foreign, or its records do
    /// not agree with its objects; nothing was imported then. Or a file of
    /// the store could not be read or written.
    pub fn import(
        &self,
        path: &Path,
        expected: Option<&KeyComponents>,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ImportReport> {
        self.import_checked(path, expected, progress, &|_| Ok(()))
    }

    /// As [`import`](Self::import), and `judge` decides whether the
    /// bundle's signature is trusted: it is called once the whole bundle
    /// verified against its checksums and before anything is published,
    /// with the bytes the signature covers and the signature, if any. An
    /// `Err` of `judge` refuses the bundle with its reason.
    ///
    /// # Errors
    ///
    /// As [`import`](Self::import), and [`Error::UntrustedBundle`] when
    /// `judge` refuses.
    pub fn import_checked(
        &self,
        path: &Path,
        expected: Option<&KeyComponents>,
        progress: &mut dyn FnMut(&Progress),
        judge: &dyn Fn(&BundleSeal<'_>) -> std::result::Result<(), String>,
    ) -> Result<ImportReport> {
        let file = self.open_plain(path)?;
        let file_length = file.metadata().map_err(Error::io("read", path))?.len();
        let mut input = BufReader::with_capacity(64 << 10, file);
        let (header, sealed_header) = read_header_sealed(path, &mut input)?;
        if let Some(expected) = expected
            && let Some(refusal) = header.mismatch(expected)
        {
            return Err(refusal);
        }
        let start = input.stream_position().map_err(Error::io("read", path))?;

        // First pass: verify everything, publish nothing.
        let mut reader = SectionReader::new(
            path,
            &mut input,
            &header,
            &sealed_header,
            start,
            file_length,
        );
        let mut carried: HashMap<[u8; 32], Carried> = HashMap::new();
        let mut claims = Vec::new();
        let mut approved = HashSet::new();
        let mut read_bytes = 0u64;
        let signed;
        loop {
            match reader.next()? {
                Next::Object { digest, size } => {
                    let offset = reader.position;
                    reader.object_bytes(&digest, size, &mut |_| Ok(()))?;
                    carried.entry(digest).or_insert(Carried { size, offset });
                    read_bytes += size;
                }
                Next::Record { sealed, record } => {
                    read_bytes += sealed.len() as u64;
                    approved.insert(crate::disk::digest(&sealed));
                    claims.push(ObjectClaim::of(&record));
                }
                Next::End => {
                    signed = reader.end_section.clone();
                    break;
                }
            }
            progress(&Progress {
                phase: "verifying",
                done: reader.counted.objects + reader.counted.records,
                total: None,
                bytes: read_bytes,
            });
        }
        let counted = reader.counted;
        let signature = reader.signature()?;
        drop(reader);
        judge(&BundleSeal {
            signed: &signed,
            signature: signature.as_deref(),
        })
        .map_err(|reason| Error::UntrustedBundle { reason })?;
        self.check_claims(path, &mut input, &carried, &claims)?;

        // Second pass: publish, re-verifying each entry as it goes.
        input
            .seek(io::SeekFrom::Start(start))
            .map_err(Error::io("read", path))?;
        let mut reader = SectionReader::new(
            path,
            &mut input,
            &header,
            &sealed_header,
            start,
            file_length,
        );
        let (report, (added_bytes, added_allocation)) = self
            .publish_sections(&mut reader, &carried, &approved)
            .map_err(|error| match error {
                // It verified whole in the first pass: it was changed since,
                // and what this pass published before the change had
                // verified.
                Error::DamagedBundle { detail } => Error::Io {
                    action: "import",
                    path: path.to_path_buf(),
                    source: io::Error::other(format!(
                        "the bundle changed while it was imported ({detail})"
                    )),
                },
                other => other,
            })?;
        let inner = &self.inner;
        debug_assert_eq!(counted.records, report.records);
        self.register(&header.components);
        // Imported entries are files: each rounded up to its blocks.
        if let Err(error) = inner.usage.adjust(
            &inner.locks,
            Delta::of(
                added_bytes,
                added_allocation,
                i64::try_from(report.new_objects).unwrap_or(i64::MAX),
            ),
        ) {
            log::debug!("cannot count an import: {error}");
        }
        if report.replaced > 0 {
            self.content_replaced();
        }
        Ok(report)
    }

    /// The bundle at `path` in its plain form, at its start: the file
    /// itself when it is plain, or else what its zstd stream holds, in a
    /// file without a name.
    fn open_plain(&self, path: &Path) -> Result<File> {
        let mut file = File::open(path).map_err(Error::io("open", path))?;
        if read_head(path, &mut file)? == PLAIN_VERSION {
            file.rewind().map_err(Error::io("read", path))?;
            return Ok(file);
        }
        let staging = self.inner.layout.staging();
        let plain = durable::unnamed(&staging).map_err(Error::io("create a file in", &staging))?;
        let mut decoder =
            zstd::stream::read::Decoder::new(file).map_err(Error::io("read", path))?;
        let mut output = BufWriter::with_capacity(1 << 20, &plain);
        io::copy(&mut decoder, &mut output).map_err(|error| {
            let kind = error.kind();
            if matches!(
                kind,
                io::ErrorKind::Other | io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
            ) {
                damaged(format!("its compressed stream is damaged: {error}"))
            } else {
                Error::io("decompress", path)(error)
            }
        })?;
        output
            .into_inner()
            .map_err(|error| Error::io("decompress", path)(error.into_error()))?;
        let mut plain = plain;
        plain.rewind().map_err(Error::io("decompress", path))?;
        Ok(plain)
    }

    /// The second pass of an import: publishes every section of a bundle
    /// the first pass verified, checking each again as it goes. Returns what
    /// it did and the bytes it added to the store.
    fn publish_sections(
        &self,
        reader: &mut SectionReader<'_>,
        carried: &HashMap<[u8; 32], Carried>,
        approved: &HashSet<[u8; 32]>,
    ) -> Result<(ImportReport, (u64, u64))> {
        let inner = &self.inner;
        let mut report = ImportReport::default();
        let (mut added_bytes, mut added_allocation) = (0u64, 0u64);
        let changed = || damaged("an entry is not one the first pass verified".into());
        let published = |error: io::Error| Error::Io {
            action: "import into",
            path: self.root().to_path_buf(),
            source: error,
        };
        loop {
            match reader.next()? {
                Next::Object { digest, size } => {
                    if !carried.contains_key(&digest) {
                        return Err(changed());
                    }
                    report.objects += 1;
                    let target = inner.layout.object(&digest);
                    let _pin = inner
                        .locks
                        .acquire(object_slot(&digest), Mode::Shared, None)
                        .map_err(published)?;
                    match fs::metadata(&target) {
                        Ok(found) if found.len() == size => {
                            if let Ok(file) = File::open(&target) {
                                touch(&file, &found);
                            }
                            reader.object_bytes(&digest, size, &mut |_| Ok(()))?;
                        }
                        _ => {
                            self.publish_object(reader, &digest, size, &target)?;
                            report.new_objects += 1;
                            added_bytes += size;
                            added_allocation += file_allocation(size);
                        }
                    }
                }
                Next::Record { sealed, record } => {
                    if !approved.contains(&crate::disk::digest(&sealed)) {
                        return Err(changed());
                    }
                    report.records += 1;
                    let target = inner.layout.record(&record.key.digest());
                    let inline = self.inline_form(&record);
                    let sealed = inline.as_ref().unwrap_or(&sealed);
                    // A packed record of the key is replaced by the file.
                    let packed = self.take_packed_record(&record.key);
                    let old = fs::read(&target).ok();
                    if packed.is_none() && old.as_ref() == Some(sealed) {
                        continue;
                    }
                    let replaced = packed
                        .or_else(|| {
                            old.and_then(|old| Record::open_any(&old).ok().map(|(old, _)| old))
                        })
                        .is_some_and(|old| old.object != record.object);
                    let file = durable::publish_open(
                        &inner.layout.staging(),
                        &target,
                        sealed,
                        inner.config.durable,
                    )
                    .map_err(published)?;
                    if inline.is_some() {
                        not_yet_refreshed(&file);
                    }
                    added_bytes += sealed.len() as u64;
                    added_allocation += file_allocation(sealed.len() as u64);
                    if replaced {
                        report.replaced += 1;
                    }
                    // An imported kernel is held here: its history says so,
                    // so that `kiln explain` finds it (P9).
                    if let Some((name, kernel)) = record.key.kernel() {
                        let seen = record::Seen {
                            key: record.key.clone(),
                            at: record.stored_at,
                        };
                        self.update_history(name, kernel, |history| {
                            history.stored = Some(seen);
                            true
                        });
                    }
                }
                Next::End => break,
            }
        }
        Ok((report, (added_bytes, added_allocation)))
    }

    /// Streams the object `reader` is at into a staging file and publishes
    /// it at `target` once its digest is checked ([`durable::publish_from`]).
    fn publish_object(
        &self,
        reader: &mut SectionReader<'_>,
        digest: &[u8; 32],
        size: u64,
        target: &Path,
    ) -> Result<()> {
        let inner = &self.inner;
        let published = |error: io::Error| Error::Io {
            action: "import into",
            path: inner.layout.root().to_path_buf(),
            source: error,
        };
        durable::publish_from(
            &inner.layout.staging(),
            target,
            inner.config.durable,
            |file| {
                reader
                    .object_bytes(digest, size, &mut |chunk| {
                        file.write_all(chunk).map_err(published)
                    })
                    .map_err(Streamed::Reading)
            },
        )
        .map(drop)
        .map_err(|streamed| match streamed {
            Streamed::Reading(error) => error,
            Streamed::Publishing(error) => published(error),
        })
    }

    /// Checks what every record of a verified bundle says about its object
    /// against the object: the bundle's own, at its place in `input`, or
    /// else the store's.
    fn check_claims(
        &self,
        path: &Path,
        input: &mut BufReader<File>,
        carried: &HashMap<[u8; 32], Carried>,
        claims: &[ObjectClaim],
    ) -> Result<()> {
        let refuse = |detail: String| Error::InconsistentBundle { detail };
        // The entry points each object must name, so that an object several
        // records point at is read once.
        let mut named: HashMap<[u8; 32], Vec<&ObjectClaim>> = HashMap::new();
        for claim in claims {
            let size = match carried.get(&claim.object) {
                Some(object) => object.size,
                None => self.stored_size(&claim.object).ok_or_else(|| {
                    refuse(format!(
                        "the record of {} names object {}, which neither the bundle nor this store holds",
                        claim.subject,
                        short(&claim.object)
                    ))
                })?,
            };
            if size != claim.size {
                return Err(refuse(format!(
                    "the record of {} says its object {} holds {} bytes, and it holds {size}",
                    claim.subject,
                    short(&claim.object),
                    claim.size
                )));
            }
            let is_stored = !carried.contains_key(&claim.object);
            if claim.entry_point.is_some() || is_stored {
                named.entry(claim.object).or_default().push(claim);
            }
        }
        for (object, claims) in named {
            let names: Vec<&[u8]> = claims
                .iter()
                .filter_map(|claim| claim.entry_point.as_deref().map(str::as_bytes))
                .collect();
            let (digest, found) = match carried.get(&object) {
                Some(bundled) => {
                    input
                        .seek(io::SeekFrom::Start(bundled.offset))
                        .map_err(Error::io("read", path))?;
                    scan(input, bundled.size, &names).map_err(Error::io("read", path))?
                }
                None => {
                    let stored = self.inner.layout.object(&object);
                    let file = File::open(&stored).map_err(Error::io("read", &stored))?;
                    scan(
                        &mut BufReader::with_capacity(CHUNK, file),
                        claims[0].size,
                        &names,
                    )
                    .map_err(Error::io("read", &stored))?
                }
            };
            if digest != object {
                return Err(refuse(format!(
                    "the record of {} names object {}, and this store's copy of it does not verify",
                    claims[0].subject,
                    short(&object)
                )));
            }
            let named_claims = claims.iter().filter(|claim| claim.entry_point.is_some());
            for (claim, is_named) in named_claims.zip(found) {
                if !is_named {
                    return Err(refuse(format!(
                        "the record of {} is for entry point {:?}, and its object {} does not name it: \
                         it holds another kernel's artifact",
                        claim.subject,
                        claim.entry_point.as_deref().unwrap_or_default(),
                        short(&object)
                    )));
                }
            }
        }
        Ok(())
    }

    /// The length of the store's object `object`, if it holds one.
    fn stored_size(&self, object: &[u8; 32]) -> Option<u64> {
        fs::metadata(self.inner.layout.object(object))
            .ok()
            .filter(fs::Metadata::is_file)
            .map(|found| found.len())
    }

    /// The inline form of `record`, as a put would write it, made from its
    /// object in the store; `None` when the record is not one a put inlines
    /// or the object does not verify.
    fn inline_form(&self, record: &Record) -> Option<Vec<u8>> {
        if !is_inlined(&record.key, record.size) {
            return None;
        }
        let bytes = fs::read(self.inner.layout.object(&record.object)).ok()?;
        (bytes.len() as u64 == record.size && digest(&bytes) == record.object)
            .then(|| record.seal_inline(&bytes))
    }
}

/// Where an object of the bundle is: its length and the offset of its bytes
/// in the file.
#[derive(Debug, Clone, Copy)]
struct Carried {
    size: u64,
    offset: u64,
}

/// What a record of the bundle says about its object.
#[derive(Debug)]
struct ObjectClaim {
    /// The record's subject, as a person reads it.
    subject: String,
    object: [u8; 32],
    size: u64,
    entry_point: Option<String>,
}

impl ObjectClaim {
    fn of(record: &Record) -> Self {
        Self {
            subject: record.key.subject_text(),
            object: record.object,
            size: record.size,
            entry_point: record.key.entry_point.clone(),
        }
    }
}

/// The first bytes of a digest, in hex: enough to tell objects apart in a
/// message.
fn short(digest: &[u8; 32]) -> String {
    hex(&digest[..8])
}

/// What the next section of a bundle is.
enum Next {
    /// An object of `size` bytes: the reader is at its bytes, which
    /// [`SectionReader::object_bytes`] reads next.
    Object { digest: [u8; 32], size: u64 },
    /// A record, opened and of the header's compiler.
    Record {
        sealed: Vec<u8>,
        record: Box<Record>,
    },
    /// The closing section, whose counts and digest matched.
    End,
}

/// Reads a bundle's sections after its header, feeding the closing digest.
/// Every length is checked against what is left of the file before anything
/// is read or allocated.
struct SectionReader<'a> {
    path: &'a Path,
    input: &'a mut BufReader<File>,
    header: &'a BundleHeader,
    hasher: blake3::Hasher,
    /// Where in the file the next byte comes from.
    position: u64,
    file_length: u64,
    counted: ImportReport,
    buffer: Box<[u8]>,
    /// The end section, tag included, once read.
    end_section: Vec<u8>,
}

impl<'a> SectionReader<'a> {
    fn new(
        path: &'a Path,
        input: &'a mut BufReader<File>,
        header: &'a BundleHeader,
        sealed_header: &[u8],
        position: u64,
        file_length: u64,
    ) -> Self {
        // The closing digest covers everything from the magic on: replay the
        // header into the hasher.
        let mut hasher = blake3::Hasher::new();
        hasher.update(MAGIC);
        hasher.update(&PLAIN_VERSION.to_le_bytes());
        hasher.update(&(sealed_header.len() as u32).to_le_bytes());
        hasher.update(sealed_header);
        Self {
            path,
            input,
            header,
            hasher,
            position,
            file_length,
            counted: ImportReport::default(),
            buffer: vec![0u8; CHUNK].into_boxed_slice(),
            end_section: Vec::new(),
        }
    }

    fn remaining(&self) -> u64 {
        self.file_length.saturating_sub(self.position)
    }

    fn read_error(&self, error: io::Error) -> Error {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            damaged("it ends early: truncated".into())
        } else {
            Error::io("read", self.path)(error)
        }
    }

    /// Fills `bytes` from the file, into the closing digest.
    fn read_exact(&mut self, bytes: &mut [u8]) -> Result<()> {
        self.input
            .read_exact(bytes)
            .map_err(|error| self.read_error(error))?;
        self.hasher.update(bytes);
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Refuses a `length` that `what` claims beyond `largest` or beyond the
    /// end of the file.
    fn check_length(&self, what: &str, length: u64, largest: u64) -> Result<()> {
        if length > largest || length > self.remaining() {
            return Err(damaged(format!(
                "{what} claims {length} bytes, and {} are left in the file",
                self.remaining()
            )));
        }
        Ok(())
    }

    fn next(&mut self) -> Result<Next> {
        let mut tag = [0u8; 1];
        self.read_exact(&mut tag)?;
        match &tag {
            b"O" => {
                let mut digest = [0u8; 32];
                let mut length = [0u8; 8];
                self.read_exact(&mut digest)?;
                self.read_exact(&mut length)?;
                let size = u64::from_le_bytes(length);
                if size == 0 {
                    return Err(damaged("an object claims 0 bytes".into()));
                }
                self.check_length("an object", size, LARGEST_OBJECT)?;
                Ok(Next::Object { digest, size })
            }
            b"R" => {
                let mut length = [0u8; 4];
                self.read_exact(&mut length)?;
                let length = u64::from(u32::from_le_bytes(length));
                self.check_length("a record", length, LARGEST_SEALED)?;
                let mut sealed = vec![0u8; length as usize];
                self.read_exact(&mut sealed)?;
                let record = Record::open(&sealed)
                    .map_err(|defect| damaged(format!("a record is {defect}")))?;
                if record.key.format != self.header.store_format
                    || record.key.components != self.header.components
                {
                    return Err(damaged(format!(
                        "a record of {} is for {}, not the header's {}",
                        record.key.subject_text(),
                        record.key.components,
                        self.header.components
                    )));
                }
                self.counted.records += 1;
                Ok(Next::Record {
                    sealed,
                    record: Box::new(record),
                })
            }
            b"E" => {
                let expected_digest = *self.hasher.finalize().as_bytes();
                let mut end = [0u8; END_LENGTH];
                self.input
                    .read_exact(&mut end)
                    .map_err(|error| self.read_error(error))?;
                let objects = u64::from_le_bytes(end[..8].try_into().expect("8 bytes"));
                let records = u64::from_le_bytes(end[8..16].try_into().expect("8 bytes"));
                let counted = self.counted;
                if objects != counted.objects || records != counted.records {
                    return Err(damaged(format!(
                        "it closes with {objects} objects and {records} records, and holds {} and {}",
                        counted.objects, counted.records
                    )));
                }
                if end[16..] != expected_digest {
                    return Err(damaged("its closing digest does not match".into()));
                }
                self.position += END_LENGTH as u64;
                self.end_section = [b"E".as_slice(), &end].concat();
                Ok(Next::End)
            }
            other => Err(damaged(format!("unknown section {:?}", other[0] as char))),
        }
    }

    /// The signature after the end section, once [`next`](Self::next) gave
    /// [`Next::End`]: `None` when the file ends there; anything else after
    /// the end is damage.
    fn signature(&mut self) -> Result<Option<Vec<u8>>> {
        if self.remaining() == 0 {
            return Ok(None);
        }
        let mut head = [0u8; 12];
        if self.remaining() < head.len() as u64 {
            return Err(damaged("it has bytes after its end".into()));
        }
        self.input
            .read_exact(&mut head)
            .map_err(|error| self.read_error(error))?;
        self.position += head.len() as u64;
        let length = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
        if &head[..8] != SIGNATURE_TAG
            || length > LARGEST_SIGNATURE
            || u64::from(length) != self.remaining()
        {
            return Err(damaged(
                "it has bytes after its end that are not one whole signature".into(),
            ));
        }
        let mut signature = vec![0u8; length as usize];
        self.input
            .read_exact(&mut signature)
            .map_err(|error| self.read_error(error))?;
        self.position += u64::from(length);
        Ok(Some(signature))
    }

    /// Reads the `size` bytes of the object [`next`](Self::next) announced
    /// through the fixed buffer, handing each chunk to `sink`, and checks
    /// them against `digest`: `sink` has seen bad bytes when this fails.
    fn object_bytes(
        &mut self,
        digest: &[u8; 32],
        size: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut object = blake3::Hasher::new();
        let mut left = size;
        while left > 0 {
            let length = usize::try_from(left).map_or(CHUNK, |left| left.min(CHUNK));
            let mut chunk = std::mem::take(&mut self.buffer);
            let read = self.read_exact(&mut chunk[..length]);
            let written = read.and_then(|()| {
                object.update(&chunk[..length]);
                sink(&chunk[..length])
            });
            self.buffer = chunk;
            written?;
            left -= length as u64;
        }
        if object.finalize().as_bytes() != digest {
            return Err(damaged("an object's bytes do not match its digest".into()));
        }
        self.counted.objects += 1;
        Ok(())
    }
}

fn damaged(detail: String) -> Error {
    Error::DamagedBundle { detail }
}

/// Reads `length` bytes of `input` through a fixed buffer: their digest, and
/// for each of `names` whether it occurs in them.
fn scan(input: &mut impl Read, length: u64, names: &[&[u8]]) -> io::Result<([u8; 32], Vec<bool>)> {
    let mut hasher = blake3::Hasher::new();
    let mut searches: Vec<Search<'_>> = names.iter().map(|name| Search::new(name)).collect();
    let mut chunk = vec![0u8; CHUNK];
    let mut left = length;
    while left > 0 {
        let size = usize::try_from(left).map_or(CHUNK, |left| left.min(CHUNK));
        input.read_exact(&mut chunk[..size])?;
        hasher.update(&chunk[..size]);
        for search in &mut searches {
            search.feed(&chunk[..size]);
        }
        left -= size as u64;
    }
    let found = searches.iter().map(|search| search.is_found()).collect();
    Ok((*hasher.finalize().as_bytes(), found))
}

/// A search for one name in bytes that arrive in pieces (Knuth–Morris–Pratt):
/// linear in the bytes whatever the name, and a match across two pieces
/// counts.
struct Search<'a> {
    name: &'a [u8],
    /// For each prefix of `name`, the length of its longest proper prefix
    /// that is also its suffix.
    fallback: Vec<usize>,
    matched: usize,
}

impl<'a> Search<'a> {
    fn new(name: &'a [u8]) -> Self {
        let mut fallback = vec![0; name.len()];
        let mut length = 0;
        for at in 1..name.len() {
            while length > 0 && name[at] != name[length] {
                length = fallback[length - 1];
            }
            if name[at] == name[length] {
                length += 1;
            }
            fallback[at] = length;
        }
        Self {
            name,
            fallback,
            matched: 0,
        }
    }

    fn is_found(&self) -> bool {
        self.matched == self.name.len()
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            if self.is_found() {
                return;
            }
            while self.matched > 0 && self.name[self.matched] != byte {
                self.matched = self.fallback[self.matched - 1];
            }
            if self.name[self.matched] == byte {
                self.matched += 1;
            }
        }
    }
}

/// Reads the magic, the version and the header of the bundle `reader`
/// starts with, compressed or plain.
///
/// # Errors
///
/// It is not a bundle this version reads.
pub fn read_header(path: &Path, reader: &mut impl Read) -> Result<BundleHeader> {
    if read_head(path, reader)? == PLAIN_VERSION {
        return read_header_after_head(path, reader).map(|(header, _)| header);
    }
    let mut plain =
        zstd::stream::read::Decoder::new(reader).map_err(|error| Error::NotABundle {
            path: path.to_path_buf(),
            reason: format!("its compressed stream cannot be read: {error}"),
        })?;
    read_header_sealed(path, &mut plain).map(|(header, _)| header)
}

/// Reads the magic and the version a bundle starts with: one this version
/// reads.
fn read_head(path: &Path, reader: &mut impl Read) -> Result<u32> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut head = [0u8; 12];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("too short".into()))?;
    if &head[..8] != MAGIC {
        return Err(not_a_bundle("it does not start with kiln's magic".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != PLAIN_VERSION && version != BUNDLE_VERSION {
        return Err(not_a_bundle(format!(
            "bundle version {version}; this kiln reads {PLAIN_VERSION} and {BUNDLE_VERSION}"
        )));
    }
    Ok(version)
}

/// Reads a plain bundle's magic, version and header.
fn read_header_sealed(path: &Path, reader: &mut impl Read) -> Result<(BundleHeader, Vec<u8>)> {
    let version = read_head(path, reader)?;
    if version != PLAIN_VERSION {
        return Err(Error::NotABundle {
            path: path.to_path_buf(),
            reason: format!("its compressed stream holds a bundle of version {version}"),
        });
    }
    read_header_after_head(path, reader)
}

fn read_header_after_head(path: &Path, reader: &mut impl Read) -> Result<(BundleHeader, Vec<u8>)> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut head = [0u8; 4];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("too short".into()))?;
    let length = u32::from_le_bytes(head);
    if u64::from(length) > LARGEST_SEALED {
        return Err(not_a_bundle(format!("a header of {length} bytes")));
    }
    // Read as it comes rather than into a buffer of the length it claims:
    // what is allocated is what the file holds.
    let mut sealed = Vec::new();
    let read = reader
        .take(u64::from(length))
        .read_to_end(&mut sealed)
        .map_err(|error| not_a_bundle(format!("its header cannot be read: {error}")))?;
    if read != length as usize {
        return Err(not_a_bundle("its header is truncated".into()));
    }
    let payload = envelope::open(HEADER_TAG, &sealed)
        .map_err(|defect| not_a_bundle(format!("its header is {defect}")))?;
    let header =
        record::decode(payload).map_err(|defect| not_a_bundle(format!("its header {defect}")))?;
    Ok((header, sealed))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_engine::ArtifactStore;
    use kiln_engine::fake::{FakeCompiler, FakeKernel};
    use kiln_engine::store::StoreKey;

    use super::*;
    use crate::config::StoreConfig;

    #[test]
    fn a_name_is_found_across_the_pieces_it_arrives_in_and_a_near_miss_is_not() {
        // P8: an entry point split by a chunk boundary still counts.
        let bytes = b"..aab_aaab_kernel..";
        for split in 0..bytes.len() {
            let mut search = Search::new(b"aaab_kernel");
            search.feed(&bytes[..split]);
            search.feed(&bytes[split..]);
            assert!(search.is_found(), "split at {split}");
        }
        let mut near = Search::new(b"aaab_kernel");
        near.feed(b"aaab_kerne aab_kernel aaab_kernal");
        assert!(!near.is_found());
        assert!(Search::new(b"").is_found());
        let (digest, found) =
            scan(&mut &bytes[..], bytes.len() as u64, &[b"kernel", b"other"]).expect("reads");
        assert_eq!(digest, *blake3::hash(bytes).as_bytes());
        assert_eq!(found, [true, false]);
    }

    #[test]
    fn p8_a_record_that_carries_its_bytes_travels_without_them_and_carries_them_again() {
        // P8: the bundle holds each artifact once, as its object.
        let base = std::env::temp_dir().join(format!("kiln-bundle-inline-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        // The records compared are files: a packed record has no path.
        let open = |name: &str| {
            DiskStore::open(StoreConfig {
                collects_automatically: false,
                pack_below: 0,
                ..StoreConfig::at(base.join(name))
            })
            .expect("a store")
        };
        let (source, destination) = (open("source"), open("destination"));
        let key = StoreKey::for_artifact(
            &FakeCompiler::default_key_components(),
            &FakeKernel::new(1).artifact_id(),
            None,
        );
        let artifact = vec![5u8; 3000];
        source.put(&key, None, &artifact, Duration::from_millis(3));
        let bundle = base.join("warm.kiln");
        let exported = source.export(&bundle, None, &mut |_| {}).expect("exports");
        assert!(
            exported.bytes < 2 * artifact.len() as u64,
            "the bytes are in it once: {exported:?}"
        );
        destination
            .import(&bundle, None, &mut |_| {})
            .expect("imports");
        let record = |store: &DiskStore| fs::read(store.record_path(&key)).expect("a record");
        assert_eq!(record(&destination), record(&source));
        assert!(record(&destination).starts_with(&artifact));
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn p8_a_bundle_is_compressed_and_one_written_before_compression_still_imports() {
        // P8: version 2 is a zstd stream of version 1; a version 1 file,
        // written by the plain writer as every bundle was before, imports.
        let base =
            std::env::temp_dir().join(format!("kiln-bundle-versions-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let open = |name: &str| {
            DiskStore::open(StoreConfig {
                collects_automatically: false,
                ..StoreConfig::at(base.join(name))
            })
            .expect("a store")
        };
        let source = open("source");
        let entries: Vec<(StoreKey, Vec<u8>)> = (0..8)
            .map(|seed| {
                let key = StoreKey::for_artifact(
                    &FakeCompiler::default_key_components(),
                    &FakeKernel::new(seed).artifact_id(),
                    None,
                );
                let text = format!(".visible .entry kernel_{seed}(.param .u64 p) {{ ret; }}\n");
                (key, text.repeat(400).into_bytes())
            })
            .collect();
        for (key, artifact) in &entries {
            source.put(key, None, artifact, Duration::from_millis(3));
        }
        let compressed = base.join("new.kiln");
        let exported = source
            .export(&compressed, None, &mut |_| {})
            .expect("exports");
        let plain = base.join("old.kiln");
        let partial = PartialFile::beside(&plain).expect("a file");
        let components = FakeCompiler::default_key_components();
        let written = source
            .write_bundle(partial.file(), &components, &mut |_| {}, None, false)
            .expect("writes the plain form");
        partial.rename_over(&plain).expect("renames");

        let head = |path: &Path| fs::read(path).expect("a bundle")[..12].to_vec();
        assert_eq!(
            head(&compressed),
            [MAGIC.as_slice(), &2u32.to_le_bytes()].concat()
        );
        assert_eq!(
            head(&plain),
            [MAGIC.as_slice(), &1u32.to_le_bytes()].concat()
        );
        assert_eq!(exported.bytes, fs::metadata(&compressed).expect("it").len());
        assert!(
            exported.bytes * 5 < written.bytes,
            "compressed {exported:?}, plain {written:?}"
        );
        let header = |path: &Path| {
            read_header(path, &mut File::open(path).expect("opens")).expect("a header")
        };
        assert_eq!(header(&compressed).components, components);
        assert_eq!(header(&plain).components, components);

        for (name, bundle) in [("from-new", &compressed), ("from-old", &plain)] {
            let destination = open(name);
            let report = destination
                .import(bundle, None, &mut |_| {})
                .expect("imports");
            assert_eq!(report.records, entries.len() as u64, "{name}");
            for (key, artifact) in &entries {
                match destination.lookup(key) {
                    kiln_engine::store::Lookup::Hit {
                        artifact: found, ..
                    } => {
                        assert_eq!(&found, artifact, "{name}");
                    }
                    kiln_engine::store::Lookup::Miss(miss) => panic!("{name}: {miss:?}"),
                }
            }
            let staging = base.join(name).join("staging");
            let left = fs::read_dir(&staging).map_or(0, Iterator::count);
            assert_eq!(left, 0, "{name}: the plain form leaves nothing in staging");
        }
    }

    #[test]
    fn p8_a_truncated_compressed_bundle_is_refused_and_imports_nothing() {
        // P8: a damaged zstd stream is damage, named, and nothing lands.
        let base =
            std::env::temp_dir().join(format!("kiln-bundle-truncated-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let open = |name: &str| {
            DiskStore::open(StoreConfig {
                collects_automatically: false,
                ..StoreConfig::at(base.join(name))
            })
            .expect("a store")
        };
        let source = open("source");
        let key = StoreKey::for_artifact(
            &FakeCompiler::default_key_components(),
            &FakeKernel::new(3).artifact_id(),
            None,
        );
        source.put(&key, None, &[7u8; 50_000], Duration::from_millis(3));
        let bundle = base.join("warm.kiln");
        source.export(&bundle, None, &mut |_| {}).expect("exports");
        let bytes = fs::read(&bundle).expect("it");
        fs::write(&bundle, &bytes[..bytes.len() - 10]).expect("truncates");
        let destination = open("destination");
        let refused = destination.import(&bundle, None, &mut |_| {});
        assert!(
            matches!(refused, Err(Error::DamagedBundle { .. })),
            "{refused:?}"
        );
        assert!(matches!(
            destination.lookup(&key),
            kiln_engine::store::Lookup::Miss(_)
        ));
        let _ = fs::remove_dir_all(&base);
    }
}
