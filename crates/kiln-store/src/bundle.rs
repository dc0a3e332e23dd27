//! Bundles (P8): a whole store in one file, to warm another machine ahead of
//! time.
//!
//! ```text
//! "kilnbndl"  u32 bundle version
//! header      sealed: store format, backend, compiler, architecture, options
//! objects     'O' digest[32] length:u64 bytes          (repeated)
//! records     'R' length:u32 sealed record             (repeated)
//! end         'E' objects:u64 records:u64 digest[32]   (BLAKE3 of all up to 'E')
//! ```
//!
//! Objects come before the records that point at them, so an import that
//! stops half-way leaves objects without records (which eviction ages out),
//! never records without objects. Import reads the bundle twice: once to
//! verify every entry and the closing digest, refusing a damaged or foreign
//! bundle before it touches the store, and once to publish.
//!
//! Records travel as pointer records: a record that carries its artifact's
//! bytes in the store (inline) is written without them, since the bundle
//! holds the object anyway, and import makes the inline form again from
//! the object it has just published.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use kiln_core::{KeyComponent, KeyComponents, STORE_FORMAT};
use serde::{Deserialize, Serialize};

use crate::disk::{DiskStore, digest, is_inlined, not_yet_refreshed, touch};
use crate::durable;
use crate::envelope;
use crate::error::{Error, Result};
use crate::layout::digest_from_name;
use crate::lock::{Mode, object_slot};
use crate::maintenance::Progress;
use crate::record::{self, Record};

const MAGIC: &[u8; 8] = b"kilnbndl";
/// The bundle format this version writes and reads.
pub const BUNDLE_VERSION: u32 = 1;
const HEADER_TAG: &[u8; 8] = b"kilnhdr1";
/// The largest object a bundle may hold: anything larger is damage.
const LARGEST_OBJECT: u64 = 4 << 30;

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

/// A reader that digests what comes through it.
struct Verifying<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> Read for Verifying<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buffer)?;
        self.hasher.update(&buffer[..read]);
        Ok(read)
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
        let partial = path.with_extension("partial");
        let file = File::create(&partial).map_err(Error::io("create", &partial))?;
        let written = self.write_bundle(file, &components, progress);
        let report = match written {
            Ok(report) => report,
            Err(error) => {
                let _ = fs::remove_file(&partial);
                return Err(error);
            }
        };
        if report.records == 0 {
            let _ = fs::remove_file(&partial);
            return Err(Error::NothingToExport);
        }
        fs::rename(&partial, path).map_err(Error::io("write", path))?;
        Ok(report)
    }

    fn write_bundle(
        &self,
        file: File,
        components: &KeyComponents,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ExportReport> {
        let inner = &self.inner;
        let mut out = Digesting {
            inner: BufWriter::with_capacity(1 << 20, file),
            hasher: blake3::Hasher::new(),
            written: 0,
        };
        let header = BundleHeader {
            store_format: STORE_FORMAT,
            components: components.clone(),
            created_at: record::now_seconds(),
        };
        let sealed_header = envelope::seal(HEADER_TAG, &record::encode(&header));
        let failed = |error| Error::Io {
            action: "write the bundle",
            path: inner.layout.root().to_path_buf(),
            source: error,
        };
        out.write_all(MAGIC)
            .and_then(|()| out.write_all(&BUNDLE_VERSION.to_le_bytes()))
            .and_then(|()| out.write_all(&(sealed_header.len() as u32).to_le_bytes()))
            .and_then(|()| out.write_all(&sealed_header))
            .map_err(failed)?;

        let mut report = ExportReport::default();
        let mut write_error = None;
        let objects = inner.layout.objects();
        let estimate = inner.usage.read().entries;
        crate::maintenance::walk_files(&objects, &mut |path, name| {
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
        crate::maintenance::walk_files(&inner.layout.records(), &mut |path, _| {
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
        let mut end = Vec::with_capacity(48);
        end.extend_from_slice(&report.objects.to_le_bytes());
        end.extend_from_slice(&report.records.to_le_bytes());
        end.extend_from_slice(&total);
        out.write_all(&end).map_err(failed)?;
        report.bytes = out.written;
        let file = out
            .inner
            .into_inner()
            .map_err(|error| failed(error.into_error()))?;
        file.sync_all().map_err(failed)?;
        Ok(report)
    }

    /// Verifies the bundle at `path` whole, refuses it when it was built for
    /// another compiler than `expected` (naming the component that differs),
    /// then publishes every entry. An entry that replaces one pointing at
    /// other bytes moves the store's generation (L10).
    ///
    /// # Errors
    ///
    /// The file is not a bundle, is damaged, or is foreign; nothing was
    /// imported then. Or a file of the store could not be written.
    pub fn import(
        &self,
        path: &Path,
        expected: Option<&KeyComponents>,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ImportReport> {
        let file = File::open(path).map_err(Error::io("open", path))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let (header, sealed_header) = read_header_sealed(path, &mut reader)?;
        if let Some(expected) = expected
            && let Some(refusal) = header.mismatch(expected)
        {
            return Err(refusal);
        }
        let start = reader.stream_position().map_err(Error::io("read", path))?;

        // First pass: verify everything, publish nothing.
        let counted = self.read_sections(
            path,
            &mut reader,
            (&header, &sealed_header),
            &mut |_| Ok(()),
            progress,
        )?;

        // Second pass: publish, re-verifying each entry as it goes.
        reader
            .seek(io::SeekFrom::Start(start))
            .map_err(Error::io("read", path))?;
        let inner = &self.inner;
        let mut report = ImportReport::default();
        let mut added_bytes = 0u64;
        self.read_sections(
            path,
            &mut reader,
            (&header, &sealed_header),
            &mut |section| {
                let staging = inner.layout.staging();
                let durable = inner.config.durable;
                match section {
                    Section::Object { digest, bytes } => {
                        report.objects += 1;
                        let target = inner.layout.object(&digest);
                        let _pin = inner
                            .locks
                            .acquire(object_slot(&digest), Mode::Shared, None)?;
                        match fs::metadata(&target) {
                            Ok(found) if found.len() == bytes.len() as u64 => {
                                if let Ok(file) = File::open(&target) {
                                    touch(&file, &found);
                                }
                            }
                            _ => {
                                durable::publish(&staging, &target, &bytes, durable)?;
                                report.new_objects += 1;
                                added_bytes += bytes.len() as u64;
                            }
                        }
                    }
                    Section::Record { sealed, record } => {
                        report.records += 1;
                        let target = inner.layout.record(&record.key.digest());
                        let inline = self.inline_form(&record);
                        let sealed = inline.as_ref().unwrap_or(&sealed);
                        let old = fs::read(&target).ok();
                        if old.as_ref() == Some(sealed) {
                            return Ok(());
                        }
                        let replaced = old
                            .and_then(|old| Record::open_any(&old).ok().map(|(old, _)| old))
                            .is_some_and(|old| old.object != record.object);
                        let file = durable::publish_open(&staging, &target, sealed, durable)?;
                        if inline.is_some() {
                            not_yet_refreshed(&file);
                        }
                        added_bytes += sealed.len() as u64;
                        if replaced {
                            report.replaced += 1;
                        }
                    }
                }
                Ok(())
            },
            &mut |_| {},
        )?;
        debug_assert_eq!(counted.records, report.records);
        self.register(&header.components);
        if let Err(error) = inner.usage.adjust(
            &inner.locks,
            i64::try_from(added_bytes).unwrap_or(i64::MAX),
            i64::try_from(report.new_objects).unwrap_or(i64::MAX),
        ) {
            log::debug!("cannot count an import: {error}");
        }
        if report.replaced > 0 {
            self.content_replaced();
        }
        Ok(report)
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

    /// Reads every section after the header, verifying each and the closing
    /// digest, and hands each to `publish`.
    fn read_sections(
        &self,
        path: &Path,
        reader: &mut BufReader<File>,
        (header, sealed_header): (&BundleHeader, &[u8]),
        publish: &mut dyn FnMut(Section) -> io::Result<()>,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<ImportReport> {
        let damaged = |detail: String| Error::DamagedBundle { detail };
        let truncated = |error: io::Error| {
            if error.kind() == io::ErrorKind::UnexpectedEof {
                damaged("it ends early: truncated".into())
            } else {
                Error::io("read", path)(error)
            }
        };
        let published = |error: io::Error| Error::Io {
            action: "import into",
            path: self.root().to_path_buf(),
            source: error,
        };
        // The closing digest covers everything from the magic on: replay the
        // header into the hasher.
        let mut input = Verifying {
            inner: reader,
            hasher: blake3::Hasher::new(),
        };
        let mut head = Vec::new();
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&BUNDLE_VERSION.to_le_bytes());
        head.extend_from_slice(&(sealed_header.len() as u32).to_le_bytes());
        head.extend_from_slice(sealed_header);
        input.hasher.update(&head);

        let mut report = ImportReport::default();
        let mut read_bytes = 0u64;
        loop {
            let mut tag = [0u8; 1];
            input.read_exact(&mut tag).map_err(truncated)?;
            match &tag {
                b"O" => {
                    let mut digest_bytes = [0u8; 32];
                    let mut length = [0u8; 8];
                    input.read_exact(&mut digest_bytes).map_err(truncated)?;
                    input.read_exact(&mut length).map_err(truncated)?;
                    let length = u64::from_le_bytes(length);
                    if length == 0 || length > LARGEST_OBJECT {
                        return Err(damaged(format!("an object claims {length} bytes")));
                    }
                    let mut bytes = Vec::with_capacity(length as usize);
                    (&mut input)
                        .take(length)
                        .read_to_end(&mut bytes)
                        .map_err(truncated)?;
                    if bytes.len() as u64 != length {
                        return Err(damaged("it ends inside an object: truncated".into()));
                    }
                    if digest(&bytes) != digest_bytes {
                        return Err(damaged("an object's bytes do not match its digest".into()));
                    }
                    report.objects += 1;
                    read_bytes += length;
                    publish(Section::Object {
                        digest: digest_bytes,
                        bytes,
                    })
                    .map_err(published)?;
                }
                b"R" => {
                    let mut length = [0u8; 4];
                    input.read_exact(&mut length).map_err(truncated)?;
                    let length = u32::from_le_bytes(length) as u64;
                    if length > 1 << 20 {
                        return Err(damaged(format!("a record claims {length} bytes")));
                    }
                    let mut sealed = Vec::with_capacity(length as usize);
                    (&mut input)
                        .take(length)
                        .read_to_end(&mut sealed)
                        .map_err(truncated)?;
                    let record = Record::open(&sealed)
                        .map_err(|defect| damaged(format!("a record is {defect}")))?;
                    if record.key.format != header.store_format
                        || record.key.components != header.components
                    {
                        return Err(damaged(format!(
                            "a record of {} is for {}, not the header's {}",
                            record.key.subject_text(),
                            record.key.components,
                            header.components
                        )));
                    }
                    report.records += 1;
                    read_bytes += length;
                    publish(Section::Record {
                        sealed,
                        record: Box::new(record),
                    })
                    .map_err(published)?;
                }
                b"E" => {
                    let expected_digest = *input.hasher.finalize().as_bytes();
                    let mut end = [0u8; 48];
                    input.inner.read_exact(&mut end).map_err(truncated)?;
                    let objects = u64::from_le_bytes(end[..8].try_into().expect("8 bytes"));
                    let records = u64::from_le_bytes(end[8..16].try_into().expect("8 bytes"));
                    if objects != report.objects || records != report.records {
                        return Err(damaged(format!(
                            "it closes with {objects} objects and {records} records, and holds {} and {}",
                            report.objects, report.records
                        )));
                    }
                    if end[16..] != expected_digest {
                        return Err(damaged("its closing digest does not match".into()));
                    }
                    return Ok(report);
                }
                other => {
                    return Err(damaged(format!("unknown section {:?}", other[0] as char)));
                }
            }
            progress(&Progress {
                phase: "verifying",
                done: report.objects + report.records,
                total: None,
                bytes: read_bytes,
            });
        }
    }
}

enum Section {
    Object {
        digest: [u8; 32],
        bytes: Vec<u8>,
    },
    Record {
        sealed: Vec<u8>,
        record: Box<Record>,
    },
}

/// Reads the magic, the version and the header of the bundle `reader`
/// starts with.
///
/// # Errors
///
/// It is not a bundle this version reads.
pub fn read_header(path: &Path, reader: &mut impl Read) -> Result<BundleHeader> {
    read_header_sealed(path, reader).map(|(header, _)| header)
}

fn read_header_sealed(path: &Path, reader: &mut impl Read) -> Result<(BundleHeader, Vec<u8>)> {
    let not_a_bundle = |reason: String| Error::NotABundle {
        path: path.to_path_buf(),
        reason,
    };
    let mut head = [0u8; 16];
    reader
        .read_exact(&mut head)
        .map_err(|_| not_a_bundle("too short".into()))?;
    if &head[..8] != MAGIC {
        return Err(not_a_bundle("it does not start with kiln's magic".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    if version != BUNDLE_VERSION {
        return Err(not_a_bundle(format!(
            "bundle version {version}; this kiln reads {BUNDLE_VERSION}"
        )));
    }
    let length = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    if length > 1 << 20 {
        return Err(not_a_bundle(format!("a header of {length} bytes")));
    }
    let mut sealed = vec![0u8; length as usize];
    reader
        .read_exact(&mut sealed)
        .map_err(|_| not_a_bundle("its header is truncated".into()))?;
    let payload = envelope::open(HEADER_TAG, &sealed)
        .map_err(|defect| not_a_bundle(format!("its header is {defect}")))?;
    let header =
        record::decode(payload).map_err(|defect| not_a_bundle(format!("its header {defect}")))?;
    Ok((header, sealed))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kiln_core::ArtifactStore;
    use kiln_core::fake::{FakeCompiler, FakeKernel};
    use kiln_core::store::StoreKey;

    use super::*;
    use crate::config::StoreConfig;

    #[test]
    fn p8_a_record_that_carries_its_bytes_travels_without_them_and_carries_them_again() {
        // P8: the bundle holds each artifact once, as its object.
        let base = std::env::temp_dir().join(format!("kiln-bundle-inline-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let open = |name: &str| {
            DiskStore::open(StoreConfig {
                collects_automatically: false,
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
}
