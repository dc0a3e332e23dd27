//! Reading an AMD GPU code object far enough to know it is whole and which
//! kernels it holds.
//!
//! `hipModuleLoadData` takes a pointer and no length: it reads as far as the
//! object's own headers say. Every artifact is therefore checked here before
//! a device sees it — every header, segment and section inside the bytes —
//! and the compile-only target uses the same reading to answer what a device
//! would: whether the kernel asked for is in the object. hipRTC returns a
//! bare ELF object on ROCm 5; a clang offload bundle around one is accepted
//! too.

use crate::error::{Error, Result};

/// The ELF machine number of AMD GPUs.
const EM_AMDGPU: u16 = 224;
/// The section type of the dynamic symbol table.
const SHT_DYNSYM: u32 = 11;
/// The suffix of a kernel descriptor's symbol: every kernel has one.
const KERNEL_DESCRIPTOR: &str = ".kd";
/// The magic that opens a clang offload bundle.
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// The section type of notes.
const SHT_NOTE: u32 = 7;
/// The owner of AMD GPU notes.
const AMDGPU_NOTE_OWNER: &[u8] = b"AMDGPU\0";
/// The note type of the code object's metadata, a MessagePack map (code
/// object version 3 and later).
const NT_AMDGPU_METADATA: u32 = 32;

/// What a code object holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectInfo {
    /// The ELF header's flags, which encode the processor and its features.
    pub flags: u32,
    /// The symbols of its kernels.
    pub kernels: Vec<String>,
}

impl CodeObjectInfo {
    /// Whether it holds the kernel `symbol`.
    pub fn has_kernel(&self, symbol: &str) -> bool {
        self.kernels.iter().any(|kernel| kernel == symbol)
    }
}

/// Reads the code object in `bytes`.
///
/// # Errors
///
/// [`Error::InvalidCodeObject`] for bytes that are not a whole AMD GPU code
/// object: another format, a truncation, a header pointing outside them.
pub fn inspect(bytes: &[u8]) -> Result<CodeObjectInfo> {
    if bytes.starts_with(BUNDLE_MAGIC) {
        return inspect(unbundle(bytes)?);
    }
    inspect_elf(bytes)
}

/// The code object's metadata in `bytes` (the `NT_AMDGPU_METADATA` note,
/// MessagePack, which [`crate::metadata`] reads), or `None` for a code
/// object without one (version 2 kept it in another form).
///
/// # Errors
///
/// [`Error::InvalidCodeObject`] for bytes that are not a whole AMD GPU code
/// object, or whose notes run past their section.
pub fn metadata_note(bytes: &[u8]) -> Result<Option<&[u8]>> {
    if bytes.starts_with(BUNDLE_MAGIC) {
        return metadata_note(unbundle(bytes)?);
    }
    // The same checks as a load: every table inside the bytes.
    inspect_elf(bytes)?;
    let reader = Reader(bytes);
    let section_headers = reader.u64(40)?;
    let section_header_size = u64::from(reader.u16(58)?);
    let section_count = u64::from(reader.u16(60)?);
    for index in 0..section_count {
        let header = section_headers.saturating_add(index * section_header_size);
        if reader.u32(header.saturating_add(4))? != SHT_NOTE {
            continue;
        }
        let offset = reader.u64(header.saturating_add(24))?;
        let size = reader.u64(header.saturating_add(32))?;
        let notes = Reader(reader.bytes(offset, size)?);
        // Each note: name size, description size, type, then the name and
        // the description, each padded to four bytes.
        let mut at = 0u64;
        while at + 12 <= size {
            let name_size = u64::from(notes.u32(at)?);
            let description_size = u64::from(notes.u32(at + 4)?);
            let kind = notes.u32(at + 8)?;
            let name = notes.bytes(at + 12, name_size)?;
            let description_at = at + 12 + name_size.next_multiple_of(4);
            let description = notes.bytes(description_at, description_size)?;
            if kind == NT_AMDGPU_METADATA && name == AMDGPU_NOTE_OWNER {
                return Ok(Some(description));
            }
            at = description_at + description_size.next_multiple_of(4);
        }
    }
    Ok(None)
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidCodeObject {
        reason: reason.into(),
    }
}

/// Little-endian reads that fail instead of reading past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&self, at: u64, length: u64) -> Result<&'a [u8]> {
        let end = at
            .checked_add(length)
            .ok_or_else(|| invalid("a size overflows"))?;
        if end > self.0.len() as u64 {
            return Err(invalid(format!(
                "it is truncated: a header points at byte {end} of {}",
                self.0.len()
            )));
        }
        Ok(&self.0[at as usize..end as usize])
    }

    fn u16(&self, at: u64) -> Result<u16> {
        let bytes = self.bytes(at, 2)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&self, at: u64) -> Result<u32> {
        let bytes = self.bytes(at, 4)?;
        Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn u64(&self, at: u64) -> Result<u64> {
        let bytes = self.bytes(at, 8)?;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn c_str(&self, at: u64) -> Result<&'a str> {
        let rest = self.bytes(at, (self.0.len() as u64).saturating_sub(at))?;
        let end = rest
            .iter()
            .position(|&byte| byte == 0)
            .ok_or_else(|| invalid("a name runs past the end"))?;
        std::str::from_utf8(&rest[..end]).map_err(|_| invalid("a name is not UTF-8"))
    }
}

fn unbundle(bytes: &[u8]) -> Result<&[u8]> {
    let reader = Reader(bytes);
    let count = reader.u64(BUNDLE_MAGIC.len() as u64)?;
    let mut at = BUNDLE_MAGIC.len() as u64 + 8;
    for _ in 0..count {
        let offset = reader.u64(at)?;
        let size = reader.u64(at + 8)?;
        let id_length = reader.u64(at + 16)?;
        let id = reader.bytes(at + 24, id_length)?;
        at += 24 + id_length;
        if size > 0 && id.windows(6).any(|window| window == b"amdgcn") {
            return reader.bytes(offset, size);
        }
    }
    Err(invalid("the offload bundle holds no AMD GPU code object"))
}

fn inspect_elf(bytes: &[u8]) -> Result<CodeObjectInfo> {
    let reader = Reader(bytes);
    let identity = reader.bytes(0, 16)?;
    if &identity[..4] != b"\x7fELF" {
        return Err(invalid("it is not an ELF file"));
    }
    if identity[4] != 2 || identity[5] != 1 {
        return Err(invalid("it is not a 64-bit little-endian ELF file"));
    }
    let machine = reader.u16(18)?;
    if machine != EM_AMDGPU {
        return Err(invalid(format!(
            "its ELF machine is {machine}, not AMD GPU ({EM_AMDGPU})"
        )));
    }
    let flags = reader.u32(48)?;

    let program_headers = reader.u64(32)?;
    let program_header_size = u64::from(reader.u16(54)?);
    let program_header_count = u64::from(reader.u16(56)?);
    // Both tables whole, not only the fields read here: a loader reads
    // every entry they count.
    reader.bytes(program_headers, program_header_size * program_header_count)?;
    reader.bytes(
        reader.u64(40)?,
        u64::from(reader.u16(58)?) * u64::from(reader.u16(60)?),
    )?;
    for index in 0..program_header_count {
        let header = program_headers.saturating_add(index * program_header_size);
        let offset = reader.u64(header.saturating_add(8))?;
        let file_size = reader.u64(header.saturating_add(32))?;
        reader.bytes(offset, file_size)?;
    }

    let section_headers = reader.u64(40)?;
    let section_header_size = u64::from(reader.u16(58)?);
    let section_count = u64::from(reader.u16(60)?);
    let section = |index: u64| section_headers.saturating_add(index * section_header_size);
    let mut kernels = Vec::new();
    for index in 0..section_count {
        let header = section(index);
        let kind = reader.u32(header.saturating_add(4))?;
        let offset = reader.u64(header.saturating_add(24))?;
        let size = reader.u64(header.saturating_add(32))?;
        // NOBITS sections (8) take no room in the file.
        if kind != 8 {
            reader.bytes(offset, size)?;
        }
        if kind != SHT_DYNSYM {
            continue;
        }
        let names_section = section(u64::from(reader.u32(header.saturating_add(40))?));
        let names_offset = reader.u64(names_section.saturating_add(24))?;
        let names_size = reader.u64(names_section.saturating_add(32))?;
        let names = Reader(reader.bytes(names_offset, names_size)?);
        let entry_size = reader.u64(header.saturating_add(56))?.max(24);
        for symbol in 0..size / entry_size {
            let name = names.c_str(u64::from(reader.u32(offset + symbol * entry_size)?))?;
            if let Some(kernel) = name.strip_suffix(KERNEL_DESCRIPTOR) {
                kernels.push(kernel.to_owned());
            }
        }
    }
    Ok(CodeObjectInfo { flags, kernels })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_not_a_code_object_are_refused() {
        for bytes in [&b""[..], b"hello", b"\x7fELF\x01\x01", &[0u8; 64]] {
            assert!(inspect(bytes).is_err(), "{bytes:?}");
        }
    }

    #[test]
    fn an_offload_bundle_without_a_gpu_entry_is_refused() {
        let mut bundle = BUNDLE_MAGIC.to_vec();
        bundle.extend_from_slice(&1u64.to_le_bytes());
        bundle.extend_from_slice(&0u64.to_le_bytes());
        bundle.extend_from_slice(&0u64.to_le_bytes());
        let id = b"host-x86_64-unknown-linux-gnu";
        bundle.extend_from_slice(&(id.len() as u64).to_le_bytes());
        bundle.extend_from_slice(id);
        let error = inspect(&bundle).expect_err("no GPU entry");
        assert!(
            error.to_string().contains("no AMD GPU code object"),
            "{error}"
        );
    }
}
