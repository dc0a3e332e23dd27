//! A compiler's identity (P1): the library file this process loaded it
//! from, found through the dynamic linker (`dladdr`), and told apart from
//! every other build of it by its ELF build-id, or by all its bytes.

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::key::hex;

/// A compiler's library file as this process loaded it: its name and a
/// digest that tells it from every other build of it (P1).
///
/// Compilers report their version as `major.minor` at best, so a patch
/// release that changes the code they emit keeps the reported version; the
/// library file does not. A shared library the linker gave a GNU build-id
/// (NVRTC, hipRTC and comgr all have one) is identified by that build-id and
/// the file's size: the linker computes the build-id over the whole build,
/// so another build has another, and reading it costs a few kilobytes. A
/// library without one is identified by the BLAKE3 of all its bytes,
/// streamed (NVRTC's is about 110 MB: some 35 ms, which every process and
/// every compile worker would otherwise pay before its first key). Neither
/// uses the file's times or inode: a copy of a library on another machine is
/// the same compiler.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LibraryFile {
    /// The file's name, without its directory and with symbolic links
    /// followed: `libnvrtc.so.13`, `libamdhip64.so.5.2.21153`.
    pub name: String,
    /// BLAKE3 of the library's build-id and size, or of all its bytes
    /// when it has no build-id.
    pub digest: [u8; 32],
}

impl LibraryFile {
    /// Identifies the library at `path`, symbolic links followed: by its
    /// build-id and size when it has a build-id, else by all its bytes.
    ///
    /// # Errors
    ///
    /// The file cannot be opened or read.
    pub fn read(path: &Path) -> io::Result<Self> {
        let path = std::fs::canonicalize(path)?;
        let file = std::fs::File::open(&path)?;
        let size = file.metadata()?.len();
        let digest = match elf_build_id(&file, size)? {
            Some(build_id) => {
                let mut hasher = blake3::Hasher::new_derive_key("kiln library build-id");
                hasher.update(&size.to_le_bytes());
                hasher.update(&build_id);
                *hasher.finalize().as_bytes()
            }
            None => {
                let mut hasher = blake3::Hasher::new();
                // Streamed, so a library of a hundred megabytes is never
                // held whole.
                hasher.update_reader(&file)?;
                *hasher.finalize().as_bytes()
            }
        };
        Ok(Self {
            name: file_name(&path),
            digest,
        })
    }

    /// The library at `path`, or, when it cannot be read, an identity that
    /// no other process shares: a compiler that cannot be told apart from
    /// another must not share their artifacts (P1). The failure is logged.
    pub fn identify(path: &Path) -> Self {
        Self::read(path).unwrap_or_else(|error| {
            log::warn!(
                "cannot read the compiler library {} to identify it ({error}); this process's \
                 artifacts are keyed to this process alone",
                path.display()
            );
            let mut unique = blake3::Hasher::new_derive_key("kiln unidentified library");
            unique.update(&std::process::id().to_le_bytes());
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            unique.update(&now.as_nanos().to_le_bytes());
            Self {
                name: format!("{} (unreadable)", file_name(path)),
                digest: *unique.finalize().as_bytes(),
            }
        })
    }

    /// The file the loaded library holding `address` was loaded from, as
    /// the dynamic linker reports it (`dladdr`), symbolic links followed:
    /// the copy really in use, wherever the search for it looked first.
    ///
    /// # Safety
    ///
    /// The library holding `address` must stay loaded during the call.
    pub unsafe fn containing(address: *const c_void) -> Option<PathBuf> {
        #[cfg(unix)]
        {
            // SAFETY: all-zero is a valid `Dl_info` (null pointers, zero
            // sizes).
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is writable; dladdr reads nothing through
            // `address`.
            let found = unsafe { libc::dladdr(address, &mut info) };
            if found == 0 || info.dli_fname.is_null() {
                return None;
            }
            // SAFETY: dladdr set `dli_fname` to a NUL-terminated path that
            // lives as long as the library stays loaded, which the caller
            // promises for the call; it is copied before returning.
            let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
            let path = PathBuf::from(path.to_string_lossy().into_owned());
            Some(std::fs::canonicalize(&path).unwrap_or(path))
        }
        #[cfg(not(unix))]
        {
            let _ = address;
            None
        }
    }
}

/// `libnvrtc.so.13 blake3:<128 bits in hex>`: enough of the digest to tell
/// any two libraries apart, in a compiler's identity that people read.
impl fmt::Display for LibraryFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} blake3:{}", self.name, hex(&self.digest[..16]))
    }
}

/// The GNU build-id of a 64-bit little-endian ELF file (what Linux
/// libraries are), read from its note segments; `None` for any other file
/// or one without a build-id. Every offset and length is checked against
/// the file's size before it is read, and a note segment is read only up to
/// 64 KiB: a damaged or hostile file gives `None`, never a large read.
fn elf_build_id(file: &std::fs::File, size: u64) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;

    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    const MAX_NOTES: u64 = 64 << 10;
    let mut header = [0u8; 64];
    if size < 64 {
        return Ok(None);
    }
    file.read_exact_at(&mut header, 0)?;
    // Magic, 64-bit class, little-endian data.
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    let u16_at = |bytes: &[u8], at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |bytes: &[u8], at: usize| {
        u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
    };
    let u64_at = |bytes: &[u8], at: usize| {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("eight bytes"))
    };
    let program_headers = u64_at(&header, 0x20);
    let entry_size = u64::from(u16_at(&header, 0x36));
    let entries = u64::from(u16_at(&header, 0x38));
    if entry_size < 56 || program_headers.saturating_add(entry_size * entries) > size {
        return Ok(None);
    }
    for index in 0..entries {
        let mut entry = [0u8; 56];
        file.read_exact_at(&mut entry, program_headers + index * entry_size)?;
        if u32_at(&entry, 0) != PT_NOTE {
            continue;
        }
        let (offset, length) = (u64_at(&entry, 8), u64_at(&entry, 32));
        if length > MAX_NOTES || offset.saturating_add(length) > size {
            continue;
        }
        let mut notes = vec![0u8; usize::try_from(length).expect("at most 64 KiB")];
        file.read_exact_at(&mut notes, offset)?;
        let mut at = 0usize;
        while at + 12 <= notes.len() {
            let name_size = u32_at(&notes, at) as usize;
            let desc_size = u32_at(&notes, at + 4) as usize;
            let kind = u32_at(&notes, at + 8);
            let name_at = at + 12;
            let desc_at = name_at + name_size.next_multiple_of(4);
            let next = desc_at.saturating_add(desc_size.next_multiple_of(4));
            if desc_at.saturating_add(desc_size) > notes.len() {
                break;
            }
            if kind == NT_GNU_BUILD_ID
                && notes[name_at..name_at + name_size] == *b"GNU\0"
                && desc_size > 0
            {
                return Ok(Some(notes[desc_at..desc_at + desc_size].to_vec()));
            }
            at = next;
        }
    }
    Ok(None)
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal 64-bit ELF file with one note segment holding `build_id`,
    /// followed by `tail`.
    fn elf_with_build_id(build_id: &[u8; 20], tail: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..4].copy_from_slice(b"\x7fELF");
        bytes[4] = 2;
        bytes[5] = 1;
        bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        let mut program_header = vec![0u8; 56];
        program_header[..4].copy_from_slice(&4u32.to_le_bytes());
        program_header[8..16].copy_from_slice(&120u64.to_le_bytes());
        program_header[32..40].copy_from_slice(&36u64.to_le_bytes());
        bytes.extend_from_slice(&program_header);
        for word in [4u32, 20, 3] {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        bytes.extend_from_slice(b"GNU\0");
        bytes.extend_from_slice(build_id);
        bytes.extend_from_slice(tail);
        bytes
    }

    #[test]
    fn a_library_with_a_build_id_is_identified_by_it_and_its_size() {
        // P1: another build is another compiler, found without reading the
        // whole library.
        let folder =
            std::env::temp_dir().join(format!("kiln-engine-build-id-{}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        let write = |name: &str, bytes: Vec<u8>| {
            let path = folder.join(name);
            std::fs::write(&path, bytes).expect("written");
            LibraryFile::read(&path).expect("readable")
        };
        let first = write("a.so", elf_with_build_id(&[1; 20], b"code"));
        let same_build = write("b.so", elf_with_build_id(&[1; 20], b"code"));
        let other_build = write("c.so", elf_with_build_id(&[2; 20], b"code"));
        let longer = write("d.so", elf_with_build_id(&[1; 20], b"code and more"));
        let no_build_id = write("e.so", b"\x7fELF but nothing more".to_vec());
        assert_eq!(first.digest, same_build.digest, "one build, one identity");
        assert_ne!(first.digest, other_build.digest, "another build");
        assert_ne!(first.digest, longer.digest, "a file of another size");
        assert_eq!(
            no_build_id.digest,
            *blake3::hash(b"\x7fELF but nothing more").as_bytes(),
            "without a build-id, the bytes"
        );
        std::fs::remove_dir_all(&folder).expect("removed");
    }

    #[test]
    fn a_library_is_identified_by_its_bytes() {
        // P1: a patch release that reports the same version is another
        // compiler.
        let folder =
            std::env::temp_dir().join(format!("kiln-engine-library-file-{}", std::process::id()));
        std::fs::create_dir_all(&folder).expect("a scratch folder");
        let original = folder.join("libcompiler.so.1");
        let patched = folder.join("patched").join("libcompiler.so.1");
        std::fs::create_dir_all(patched.parent().expect("a parent")).expect("a folder");
        std::fs::write(&original, b"the compiler's code").expect("written");
        std::fs::write(&patched, b"the compiler's code, patched").expect("written");
        let link = folder.join("libcompiler.so");
        std::os::unix::fs::symlink(&original, &link).expect("a link");

        let first = LibraryFile::read(&original).expect("readable");
        assert_eq!(first, LibraryFile::read(&original).expect("readable"));
        assert_eq!(
            first,
            LibraryFile::read(&link).expect("readable"),
            "links are followed"
        );
        assert_eq!(first.name, "libcompiler.so.1");
        let other = LibraryFile::read(&patched).expect("readable");
        assert_eq!(other.name, first.name, "the same name");
        assert_ne!(other, first, "other bytes, another library");
        assert_ne!(other.to_string(), first.to_string());

        let unreadable = LibraryFile::identify(&folder.join("missing.so"));
        assert_ne!(
            unreadable,
            LibraryFile::identify(&folder.join("missing.so")),
            "an unreadable library is never the same compiler twice"
        );
        std::fs::remove_dir_all(&folder).expect("removed");
    }
}
