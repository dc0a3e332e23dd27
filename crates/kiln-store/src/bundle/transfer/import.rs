//! Reading a bundle into the store: a first pass that publishes nothing
//! and checks every entry and what its records claim, then a second that
//! publishes, checking again.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use kiln_engine::KeyComponents;

use crate::bundle::format::{
    BundleHeader, CHUNK, PLAIN_VERSION, STREAM_RATIO, STREAM_VERSION, damaged, short,
};
use crate::bundle::reports::{BundleSeal, ImportReport};
use crate::disk::{DiskStore, not_yet_refreshed, touch};
use crate::durable;
use crate::error::{Error, Result};
use crate::lock::{Mode, object_slot};
use crate::maintenance::Progress;
use crate::record::{self, Record, digest, is_inlined};
use crate::usage::{Delta, file_allocation};

use super::head::{inflate_bounded, read_head, read_header_sealed, read_manifest};
use super::reader::{Next, SectionReader, scan};

/// What streaming an object into the store failed with: reading the
/// bundle (or writing what it read), or publishing the file.
pub(super) enum Streamed {
    Reading(Error),
    Publishing(io::Error),
}

impl From<io::Error> for Streamed {
    fn from(error: io::Error) -> Self {
        Self::Publishing(error)
    }
}

impl DiskStore {
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
        let (file, judged) = self.open_plain(path, expected, judge)?;
        let file_length = file.metadata().map_err(Error::io("read", path))?.len();
        let mut input = BufReader::with_capacity(64 << 10, file);
        let (header, sealed_header) = read_header_sealed(path, &mut input)?;
        if let Some(manifest) = &judged
            && *manifest != header
        {
            return Err(damaged(
                "its stream's header is not the one its manifest gives".into(),
            ));
        }
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
                    approved.insert(crate::record::digest(&sealed));
                    claims.push(ObjectClaim::of(&record));
                }
                Next::Blob { sealed, record } => {
                    read_bytes += sealed.len() as u64;
                    approved.insert(crate::record::digest(&sealed));
                    claims.push(ObjectClaim {
                        subject: format!("the blob {}", record.key),
                        object: record.object,
                        size: record.size,
                        entry_point: None,
                    });
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
        // A version 3 bundle's signature, over its manifest, was judged
        // before its stream was decompressed.
        if judged.is_none() {
            judge(&BundleSeal {
                signed: &signed,
                signature: signature.as_deref(),
            })
            .map_err(|reason| Error::UntrustedBundle { reason })?;
        }
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
        debug_assert_eq!(counted.blobs, report.blobs);
        self.register(&header.components);
        // Imported entries are files: each rounded up to its blocks.
        if let Err(error) = inner.files.usage.adjust(
            &inner.files.locks,
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
    /// file without a name, never more than the stream may hold. For a
    /// version 3 bundle, also the header its manifest gives, once the
    /// manifest was checked against `expected`, its plain length against
    /// the store's limit, the stream against its digest and the signature
    /// by `judge`: all before a byte is decompressed.
    fn open_plain(
        &self,
        path: &Path,
        expected: Option<&KeyComponents>,
        judge: &dyn Fn(&BundleSeal<'_>) -> std::result::Result<(), String>,
    ) -> Result<(File, Option<BundleHeader>)> {
        let mut file = File::open(path).map_err(Error::io("open", path))?;
        let file_length = file.metadata().map_err(Error::io("read", path))?.len();
        let limit = self.inner.files.config.max_bytes;
        match read_head(path, &mut file)? {
            PLAIN_VERSION => {
                file.rewind().map_err(Error::io("read", path))?;
                Ok((file, None))
            }
            STREAM_VERSION => {
                let bound = limit.min(file_length.saturating_mul(STREAM_RATIO));
                let plain = self.inflate(
                    path,
                    BufReader::new(file),
                    bound,
                    None,
                    "the most a version 2 bundle of its length may hold here",
                )?;
                Ok((plain, None))
            }
            _ => {
                let mut input = BufReader::with_capacity(CHUNK, file);
                let opened = read_manifest(path, &mut input, Some(file_length))?;
                let manifest = &opened.manifest;
                if let Some(expected) = expected
                    && let Some(refusal) = manifest.header.mismatch(expected)
                {
                    return Err(refusal);
                }
                if manifest.plain_length > limit {
                    return Err(Error::OversizedBundle {
                        claimed: manifest.plain_length,
                        limit,
                    });
                }
                let digest = stream_digest(&mut input, manifest.stream_length).map_err(
                    |error| match error.kind() {
                        io::ErrorKind::UnexpectedEof => damaged("it ends early: truncated".into()),
                        _ => Error::io("read", path)(error),
                    },
                )?;
                if digest != manifest.stream_digest {
                    return Err(damaged(
                        "its compressed stream does not match its manifest's digest".into(),
                    ));
                }
                judge(&BundleSeal {
                    signed: &opened.sealed,
                    signature: opened.signature.as_deref(),
                })
                .map_err(|reason| Error::UntrustedBundle { reason })?;
                input
                    .seek(io::SeekFrom::Start(opened.stream_start))
                    .map_err(Error::io("read", path))?;
                let plain = self.inflate(
                    path,
                    input.take(manifest.stream_length),
                    manifest.plain_length,
                    Some(manifest.plain_length),
                    "the length its manifest gives",
                )?;
                Ok((plain, Some(opened.manifest.header)))
            }
        }
    }

    /// Decompresses `input` into a file without a name in the staging
    /// folder, at most `limit` bytes (and exactly `exact`, when given).
    fn inflate(
        &self,
        path: &Path,
        input: impl Read,
        limit: u64,
        exact: Option<u64>,
        why: &str,
    ) -> Result<File> {
        let staging = self.inner.files.layout.staging();
        let plain = durable::unnamed(&staging).map_err(Error::io("create a file in", &staging))?;
        let mut output = BufWriter::with_capacity(1 << 20, &plain);
        let written = inflate_bounded(path, input, &mut output, limit, why)?;
        output
            .into_inner()
            .map_err(|error| Error::io("decompress", path)(error.into_error()))?;
        if let Some(exact) = exact
            && written != exact
        {
            return Err(damaged(format!(
                "its compressed stream holds {written} bytes, and its manifest says {exact}"
            )));
        }
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
                    let target = inner.files.layout.object(&digest);
                    let _pin = inner
                        .files
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
                    if !approved.contains(&crate::record::digest(&sealed)) {
                        return Err(changed());
                    }
                    report.records += 1;
                    let target = inner.files.layout.record(&record.key.digest());
                    let inline = self.inline_form(&record);
                    let sealed = inline.as_ref().unwrap_or(&sealed);
                    // A packed record of the key is replaced by the file.
                    let packed = self.inner.files.take_packed_record(&record.key);
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
                        &inner.files.layout.staging(),
                        &target,
                        sealed,
                        inner.files.config.durable,
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
                Next::Blob { sealed, record } => {
                    if !approved.contains(&crate::record::digest(&sealed)) {
                        return Err(changed());
                    }
                    report.blobs += 1;
                    let target = inner.files.layout.record(&record.key.digest());
                    let old = fs::read(&target).ok();
                    if old.as_ref() == Some(&sealed) {
                        continue;
                    }
                    durable::publish_open(
                        &inner.files.layout.staging(),
                        &target,
                        &sealed,
                        inner.files.config.durable,
                    )
                    .map_err(published)?;
                    added_bytes += sealed.len() as u64;
                    added_allocation += file_allocation(sealed.len() as u64);
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
            path: inner.files.layout.root().to_path_buf(),
            source: error,
        };
        durable::publish_from(
            &inner.files.layout.staging(),
            target,
            inner.files.config.durable,
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
                    let stored = self.inner.files.layout.object(&object);
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
        fs::metadata(self.inner.files.layout.object(object))
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
        let bytes = fs::read(self.inner.files.layout.object(&record.object)).ok()?;
        (bytes.len() as u64 == record.size && digest(&bytes) == record.object)
            .then(|| record.seal_inline(&bytes))
    }
}

/// Where an object of the bundle is: its length and the offset of its bytes
/// in the file.
#[derive(Debug, Clone, Copy)]
pub(super) struct Carried {
    size: u64,
    offset: u64,
}

/// What a record of the bundle says about its object.
#[derive(Debug)]
pub(super) struct ObjectClaim {
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

/// Reads `length` bytes of `input` through a fixed buffer: their digest.
fn stream_digest(input: &mut impl Read, length: u64) -> io::Result<[u8; 32]> {
    scan(input, length, &[]).map(|(digest, _)| digest)
}
