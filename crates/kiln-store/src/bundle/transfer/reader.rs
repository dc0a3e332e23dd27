//! The sections of a bundle after its header, read with every length
//! checked before anything is read or allocated, and the search for an
//! entry point's name in an object's bytes.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::bundle::format::{
    BundleHeader, CHUNK, END_LENGTH, LARGEST_OBJECT, LARGEST_SEALED, LARGEST_SIGNATURE, MAGIC,
    PLAIN_VERSION, SIGNATURE_TAG, damaged,
};
use crate::bundle::reports::ImportReport;
use crate::error::{Error, Result};
use crate::record::Record;

/// What the next section of a bundle is.
pub(super) enum Next {
    /// An object of `size` bytes: the reader is at its bytes, which
    /// [`SectionReader::object_bytes`] reads next.
    Object { digest: [u8; 32], size: u64 },
    /// A record, opened and of the header's compiler.
    Record {
        sealed: Vec<u8>,
        record: Box<Record>,
    },
    /// A named blob's record (P15), opened.
    Blob {
        sealed: Vec<u8>,
        record: Box<crate::record::BlobRecord>,
    },
    /// The closing section, whose counts and digest matched.
    End,
}

/// Reads a bundle's sections after its header, feeding the closing digest.
/// Every length is checked against what is left of the file before anything
/// is read or allocated.
pub(super) struct SectionReader<'a> {
    path: &'a Path,
    input: &'a mut BufReader<File>,
    header: &'a BundleHeader,
    hasher: blake3::Hasher,
    /// Where in the file the next byte comes from.
    pub(super) position: u64,
    file_length: u64,
    pub(super) counted: ImportReport,
    buffer: Box<[u8]>,
    /// The end section, tag included, once read.
    pub(super) end_section: Vec<u8>,
}

impl<'a> SectionReader<'a> {
    pub(super) fn new(
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

    pub(super) fn remaining(&self) -> u64 {
        self.file_length.saturating_sub(self.position)
    }

    pub(super) fn read_error(&self, error: io::Error) -> Error {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            damaged("it ends early: truncated".into())
        } else {
            Error::io("read", self.path)(error)
        }
    }

    /// Fills `bytes` from the file, into the closing digest.
    pub(super) fn read_exact(&mut self, bytes: &mut [u8]) -> Result<()> {
        self.input
            .read_exact(bytes)
            .map_err(|error| self.read_error(error))?;
        self.hasher.update(bytes);
        self.position += bytes.len() as u64;
        Ok(())
    }

    /// Refuses a `length` that `what` claims beyond `largest` or beyond the
    /// end of the file.
    pub(super) fn check_length(&self, what: &str, length: u64, largest: u64) -> Result<()> {
        if length > largest || length > self.remaining() {
            return Err(damaged(format!(
                "{what} claims {length} bytes, and {} are left in the file",
                self.remaining()
            )));
        }
        Ok(())
    }

    pub(super) fn next(&mut self) -> Result<Next> {
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
            b"B" => {
                let mut length = [0u8; 4];
                self.read_exact(&mut length)?;
                let length = u64::from(u32::from_le_bytes(length));
                self.check_length("a blob record", length, LARGEST_SEALED)?;
                let mut sealed = vec![0u8; length as usize];
                self.read_exact(&mut sealed)?;
                let record = crate::record::BlobRecord::open(&sealed)
                    .map_err(|defect| damaged(format!("a blob record is {defect}")))?;
                if record.size == 0 {
                    return Err(damaged("a blob record claims 0 bytes".into()));
                }
                self.counted.blobs += 1;
                Ok(Next::Blob {
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
                let held = counted.records + counted.blobs;
                if objects != counted.objects || records != held {
                    return Err(damaged(format!(
                        "it closes with {objects} objects and {records} records, and holds {} and {held}",
                        counted.objects
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
    pub(super) fn signature(&mut self) -> Result<Option<Vec<u8>>> {
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
    pub(super) fn object_bytes(
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

/// Reads `length` bytes of `input` through a fixed buffer: their digest, and
/// for each of `names` whether it occurs in them.
pub(in crate::bundle) fn scan(
    input: &mut impl Read,
    length: u64,
    names: &[&[u8]],
) -> io::Result<([u8; 32], Vec<bool>)> {
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
pub(in crate::bundle) struct Search<'a> {
    name: &'a [u8],
    /// For each prefix of `name`, the length of its longest proper prefix
    /// that is also its suffix.
    fallback: Vec<usize>,
    matched: usize,
}

impl<'a> Search<'a> {
    pub(in crate::bundle) fn new(name: &'a [u8]) -> Self {
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

    pub(in crate::bundle) fn is_found(&self) -> bool {
        self.matched == self.name.len()
    }

    pub(in crate::bundle) fn feed(&mut self, bytes: &[u8]) {
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
