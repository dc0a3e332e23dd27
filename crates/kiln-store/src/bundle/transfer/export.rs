//! Writing a bundle: every entry of one compiler, streamed, checksummed,
//! compressed and optionally signed.

use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, Write};
use std::path::Path;

use kiln_engine::store::FAILURE_BLOB_KIND;
use kiln_engine::{KeyComponents, STORE_FORMAT};

use crate::bundle::format::{
    BUNDLE_VERSION, BundleHeader, COMPRESSION_LEVEL, END_LENGTH, HEADER_TAG, LARGEST_SIGNATURE,
    MAGIC, MANIFEST_TAG, Manifest, PLAIN_VERSION, SIGNATURE_TAG,
};
use crate::bundle::reports::{ExportReport, SignBundle};
use crate::disk::DiskStore;
use crate::envelope;
use crate::error::{Error, Result};
use crate::lock::{Mode, object_slot};
use crate::maintenance::Progress;
use crate::partial::PartialFile;
use crate::record::{self, AnyRecord, Record, digest};
use crate::walk::digest_from_name;

/// A writer that digests what goes through it.
pub(super) struct Digesting<W> {
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

/// Where a bundle's plain form goes: the file, or a zstd stream into it,
/// which the compressed form's head is written before, once its length and
/// digest are known.
pub(super) enum Sink<'a> {
    Plain(BufWriter<&'a File>),
    Compressed(Box<zstd::stream::write::Encoder<'static, Digesting<BufWriter<&'a File>>>>),
}

/// A finished sink: the buffered file, and for a stream its length and
/// digest.
type Finished<'a> = (BufWriter<&'a File>, Option<(u64, [u8; 32])>);

impl<'a> Sink<'a> {
    fn new(file: BufWriter<&'a File>, compressed: bool) -> io::Result<Self> {
        if !compressed {
            return Ok(Self::Plain(file));
        }
        let stream = Digesting {
            inner: file,
            hasher: blake3::Hasher::new(),
            written: 0,
        };
        let mut encoder = zstd::stream::write::Encoder::new(stream, COMPRESSION_LEVEL)?;
        // Damage to the stream is then named as such, before the plain
        // form's own digests would catch it.
        encoder.include_checksum(true)?;
        Ok(Self::Compressed(Box::new(encoder)))
    }

    /// Ends the zstd stream, if any: the buffered file, still to flush, and
    /// for a stream its length and digest.
    fn finish(self) -> io::Result<Finished<'a>> {
        match self {
            Self::Plain(file) => Ok((file, None)),
            Self::Compressed(encoder) => {
                let stream = encoder.finish()?;
                let digest = *stream.hasher.finalize().as_bytes();
                Ok((stream.inner, Some((stream.written, digest))))
            }
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

/// What [`DiskStore::write_bundle`] wrote.
pub(in crate::bundle) struct WrittenBundle {
    pub(in crate::bundle) report: ExportReport,
    pub(in crate::bundle) header: BundleHeader,
    /// Bytes of the plain form.
    pub(in crate::bundle) plain_length: u64,
    /// The length and digest of the zstd stream, when compressed.
    pub(in crate::bundle) stream: Option<(u64, [u8; 32])>,
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
    /// [`BundleSeal::signed`](crate::BundleSeal::signed)).
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
        // The stream is written first, beside the bundle, so that the head
        // before it can say how long it is and what its digest is. Dropping
        // either partial file on any way out below removes it.
        let stream = PartialFile::beside(path).map_err(Error::io("create a file beside", path))?;
        let written = self.write_bundle(stream.file(), &components, progress, None, true)?;
        let report = written.report;
        if report.records + report.blobs == 0 {
            return Err(Error::NothingToExport);
        }
        let (stream_length, stream_digest) = written.stream.ok_or_else(|| {
            Error::io("write", path)(io::Error::other("the stream was not compressed"))
        })?;
        let manifest = Manifest {
            header: written.header,
            plain_length: written.plain_length,
            stream_length,
            stream_digest,
        };
        let sealed = envelope::seal(MANIFEST_TAG, &record::encode(&manifest));
        let signature = sign.map(|sign| sign(&sealed));
        let partial = PartialFile::beside(path).map_err(Error::io("create a file beside", path))?;
        let mut out = BufWriter::with_capacity(1 << 20, partial.file());
        write_head(&mut out, &sealed, signature.as_deref()).map_err(Error::io("write", path))?;
        let mut input = stream.file();
        input.rewind().map_err(Error::io("read", path))?;
        io::copy(&mut input, &mut out).map_err(Error::io("write", path))?;
        let file = out
            .into_inner()
            .map_err(|error| Error::io("write", path)(error.into_error()))?;
        file.sync_all().map_err(Error::io("write", path))?;
        let bytes = file.metadata().map_err(Error::io("write", path))?.len();
        drop(stream);
        partial
            .rename_over(path)
            .map_err(Error::io("write", path))?;
        Ok(ExportReport { bytes, ..report })
    }

    /// Writes the plain form of a bundle of `components` into `file`, or a
    /// zstd stream of it when `compressed`; a plain form ends with the
    /// signature `sign` makes of its end section.
    pub(in crate::bundle) fn write_bundle(
        &self,
        file: &File,
        components: &KeyComponents,
        progress: &mut dyn FnMut(&Progress),
        sign: Option<SignBundle<'_>>,
        compressed: bool,
    ) -> Result<WrittenBundle> {
        let inner = &self.inner;
        let failed = |error| Error::Io {
            action: "write the bundle",
            path: inner.files.layout.root().to_path_buf(),
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
        let root = inner.files.layout.root();
        let estimate = inner.files.usage.read().entries;
        crate::walk::walk_files(root, "objects", &mut |path, name| {
            if write_error.is_some() {
                return;
            }
            let Some(expected) = digest_from_name(name) else {
                return;
            };
            let Ok(Some(_pin)) =
                inner
                    .files
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
        self.inner
            .files
            .each_packed(crate::pack::Kind::Object, &mut |bytes| {
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
        self.inner
            .files
            .each_packed(crate::pack::Kind::Record, &mut |sealed| {
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
        crate::walk::walk_files(root, "records", &mut |path, _| {
            if write_error.is_some() {
                return;
            }
            let Ok(sealed) = fs::read(&path) else {
                return;
            };
            // Named blobs travel with the records (P15), all but the
            // failures this machine remembers.
            if let Ok(AnyRecord::Blob(blob)) = AnyRecord::open(&sealed) {
                if blob.key.kind == FAILURE_BLOB_KIND {
                    return;
                }
                let result = out
                    .write_all(b"B")
                    .and_then(|()| out.write_all(&(sealed.len() as u32).to_le_bytes()))
                    .and_then(|()| out.write_all(&sealed));
                match result {
                    Ok(()) => report.blobs += 1,
                    Err(error) => write_error = Some(error),
                }
                return;
            }
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
        end.extend_from_slice(&(report.records + report.blobs).to_le_bytes());
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
        let plain_length = out.written;
        let (file, stream) = out.inner.finish().map_err(failed)?;
        let file = file
            .into_inner()
            .map_err(|error| failed(error.into_error()))?;
        file.sync_all().map_err(failed)?;
        report.bytes = file.metadata().map_err(failed)?.len();
        Ok(WrittenBundle {
            report,
            header,
            plain_length,
            stream,
        })
    }
}

/// Writes a version 3 bundle's head: the magic, the version, the sealed
/// manifest and the signature section (empty when unsigned).
pub(in crate::bundle) fn write_head(
    out: &mut impl Write,
    sealed_manifest: &[u8],
    signature: Option<&[u8]>,
) -> io::Result<()> {
    let signature = signature.unwrap_or_default();
    let signature_length = u32::try_from(signature.len())
        .ok()
        .filter(|length| *length <= LARGEST_SIGNATURE)
        .ok_or_else(|| {
            io::Error::other(format!(
                "a signature of {} bytes is over the limit of {LARGEST_SIGNATURE}",
                signature.len()
            ))
        })?;
    out.write_all(MAGIC)?;
    out.write_all(&BUNDLE_VERSION.to_le_bytes())?;
    out.write_all(&(sealed_manifest.len() as u32).to_le_bytes())?;
    out.write_all(sealed_manifest)?;
    out.write_all(SIGNATURE_TAG)?;
    out.write_all(&signature_length.to_le_bytes())?;
    out.write_all(signature)
}
