//! How `kiln warm` finds kernels: source files whose header comment says
//! how to build them.
//!
//! # The header
//!
//! A kernel file (`*.wgsl`, `*.spv`, `*.cu`, `*.hip`, and a `*.cuh` with a
//! kiln header: one without is a header, read only when included) says
//! how it is built in the
//! `// kiln <key>: <value>` lines of its first comment block (under a
//! license block too; see [`crate::header`]):
//!
//! ```text
//! // kiln entry: forward backward
//! // kiln specialize: WORKGROUP=64
//! // kiln specialize: WORKGROUP=256 LEAK=0.01
//! // kiln include: ../include
//! // kiln options: --use_fast_math -std=c++20
//! // kiln backends: cuda hip
//! ```
//!
//! - `entry` names the functions to launch (B6), on one line or several,
//!   each once: `@compute` functions in WGSL (default: every one of the
//!   file), `__global__` functions or template instantiations
//!   (`scale<float, 128>`) in CUDA and HIP, which must name at least one.
//! - each `specialize` line is one kernel per entry built from the file:
//!   `NAME=VALUE` pairs, separated by spaces, set pipeline-overridable
//!   constants in WGSL (by name, or by the number of an `@id(n)`) and
//!   preprocessor definitions (`-DNAME=VALUE`) in CUDA and HIP. A file
//!   without one is one kernel per entry with the defaults.
//! - `define` (CUDA and HIP) sets `NAME=VALUE` pairs for every
//!   specialization; a program's defines are keyed in canonical order, so
//!   the order they are written in does not matter.
//! - `include` adds include folders, relative to the file's folder (P13);
//!   one that does not exist is an error naming it.
//! - `stdlib: off` turns off kiln's stand-ins for the C and C++ standard
//!   headers (`<cstdint>`, `<cmath>`, ...; B8).
//! - `options` are compiler options from each backend's allow-list
//!   ([`crate::options`]).
//! - `backends` sends a `.cu` file to HIP as well as (or instead of) CUDA;
//!   without it a `.cu` file is CUDA's, and HIP's only under `--backend
//!   hip`; with it, the line wins over `--backend` unless `--force` is
//!   given. A `.hip` file is always HIP's.
//!
//! A SPIR-V module (`NAME.spv`) is a binary, with no comments: its header
//! lines are the whole of a sidecar text file `NAME.spv.kiln` beside it,
//! under the same rules (only `entry` and `specialize` apply, and a line
//! that is no comment is an error). Without a sidecar, every `GLCompute`
//! entry of the module is a kernel with its default constants. The
//! sidecar is never compiled: it reaches a kernel's key only through the
//! entries and constants it sets (P14).
//!
//! A `.wgsl` (or `.wesl`) file without a `@compute` function is a module,
//! not a kernel: it is listed as one, never as a failure, and each kernel
//! whose `#import`s reach it (directly or through another module) is
//! built with it, its bytes in that kernel's id and key, so an edit of a
//! module recompiles exactly the kernels that import it (P13). A module is
//! known by its `#define_import_path`, or by its path under the folder
//! searched (`shared/math.wgsl` is `shared::math`, or `math`).
//!
//! A header comment, rather than a manifest beside the kernels, keeps a
//! kernel and how it is built in one file that can be copied alone, and
//! needs no TOML parser in the build.
//!
//! The text handed to the compiler is the file exactly as it is: the
//! header is a comment. So a program that compiles the same file with the
//! same defines compiles the same text, and shares `kiln warm`'s
//! artifacts (P14).
//!
//! # The walk
//!
//! Bad input fails one file, never the run: a file that is not UTF-8 text,
//! is larger than [`MAX_FILE_BYTES`] or has a malformed header (a `.spv`
//! file whose sidecar is any of these, or that naga cannot read) is listed as
//! a failure with its reason, and every other file is still compiled. The
//! walk follows no symbolic link, to a folder or to a file: a link may lead
//! out of the folder asked for or around a loop (`loop -> .` would find
//! every file again at each level), and a link to `/dev/zero` never ends.
//! Each skipped link is noted. Folders are visited once each by device and
//! inode, so a bind mount that loops is entered once. Only regular files
//! are read: a FIFO or a device node named like a kernel is skipped with a
//! note, and files are opened without blocking and without following a
//! link that replaced them since the folder was listed.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::wgsl::{self, WgslModule};
use crate::header;
use crate::kernel::{Language, Specialization};
use anyhow::{Context, Result, bail};

/// The largest kernel file read: a kernel file over it fails alone, and
/// no file named like a kernel can make the walk read without end.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// A kernel file and the kernels its header asks for.
#[derive(Debug, Clone)]
pub struct KernelFile {
    /// Its name relative to the folder searched, for labels and ids.
    pub name: String,
    /// The folder holding it: its quoted includes are looked for there
    /// first, and its `include` lines are relative to it.
    pub folder: PathBuf,
    /// Its language.
    pub language: Language,
    /// The text handed to the compiler: the file as it is (P14). Shared by
    /// every kernel of the file. Empty for a `.spv` file, whose module is
    /// [`module`](Self::module).
    pub source: Arc<str>,
    /// A `.spv` file's bytes, as they are: what wgpu is given. `None` for
    /// a text file.
    pub module: Option<Arc<[u8]>>,
    /// The entry points, in the header's order, each once.
    pub entries: Vec<String>,
    /// One per kernel of each entry; one empty specialization when the
    /// header has none.
    pub specializations: Vec<Specialization>,
    /// The header's include folders, relative to [`folder`](Self::folder)
    /// already.
    pub includes: Vec<PathBuf>,
    /// The header's compiler options, as written: each backend checks them
    /// against its allow-list.
    pub options: Vec<String>,
    /// The backends a `.cu` file's header names; `None` without the line.
    pub backends: Option<Vec<String>>,
    /// The header's `define` pairs, for every specialization.
    pub defines: Vec<(String, String)>,
    /// Whether kiln's stand-ins for the standard headers are on (B8).
    pub stdlib: bool,
    /// The WGSL modules of the folder its `#import`s reach, directly or
    /// through another module, each under the name it is imported by
    /// (B9); their bytes are in its kernels' ids (P13).
    pub modules: Vec<WgslModule>,
}

impl KernelFile {
    /// What is compiled, byte for byte: the module of a `.spv` file, the
    /// text of any other. Kernel ids digest it (P14).
    pub fn compiled(&self) -> &[u8] {
        self.module.as_deref().unwrap_or(self.source.as_bytes())
    }

    /// The label of the module made with `specialization`, holding every
    /// entry (B6): `name [A=1 B=2]`, with `:a,b` after the name when the
    /// file has several entries.
    pub fn module_label(&self, specialization: &Specialization) -> String {
        let entries = self.entries.join(",");
        self.label(&entries, specialization)
    }

    /// The label of the kernel of `entry` made with `specialization`:
    /// `name [A=1 B=2]`, with `:entry` after the name when the file has
    /// several entries.
    pub fn label(&self, entry: &str, specialization: &Specialization) -> String {
        let name = if self.entries.len() > 1 {
            format!("{}:{entry}", self.name)
        } else {
            self.name.clone()
        };
        if specialization.0.is_empty() {
            name
        } else {
            format!("{name} [{specialization}]")
        }
    }
}

/// A file or folder under the folder searched that could not be used.
#[derive(Debug, Clone)]
pub struct Unusable {
    /// Its name relative to the folder searched.
    pub name: String,
    /// Why, naming the line or the limit where there is one.
    pub reason: String,
}

/// What a search of a folder found.
#[derive(Debug, Default)]
pub struct Found {
    /// The kernel files, in name order.
    pub files: Vec<KernelFile>,
    /// Kernel files (and folders) that could not be read or parsed: each
    /// fails alone.
    pub failed: Vec<Unusable>,
    /// Entries left alone on purpose: links, FIFOs, device nodes, folders
    /// already visited.
    pub skipped: Vec<Unusable>,
}

/// Every kernel file under `folder`, searched recursively in name order, as
/// the module's documentation describes the walk.
///
/// # Errors
///
/// `folder` itself cannot be read. Anything wrong below it is reported in
/// [`Found::failed`] or [`Found::skipped`] instead.
pub fn find(folder: &Path) -> Result<Found> {
    let mut found = Found::default();
    let mut visited = HashSet::new();
    let root = fs::metadata(folder).with_context(|| format!("reading {}", folder.display()))?;
    visited.insert((root.dev(), root.ino()));
    let mut paths = Vec::new();
    let entries = fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?;
    walk(
        folder,
        folder,
        entries,
        &mut visited,
        &mut paths,
        &mut found,
    );
    paths.sort_by(|(left, _), (right, _)| left.cmp(right));
    let mut modules = Vec::new();
    for (path, language) in paths {
        let name = relative_name(folder, &path);
        let made = match read_bounded(&path) {
            Ok(Contents::Bytes(bytes)) if language == Language::Spirv => {
                spirv_file(name.clone(), &path, bytes)
            }
            Ok(Contents::Bytes(bytes)) => match text_of(bytes) {
                // A `.cuh` file is a kernel file only with a kiln header;
                // else it is a header, read when a kernel includes it.
                Ok(text) if is_header_file(&path) && !header::has_kiln_lines(&text) => continue,
                Ok(text) => kernel_file(name.clone(), &path, language, text),
                Err(reason) => Err(anyhow::Error::msg(reason)),
            },
            Ok(Contents::NotRegular(kind)) => {
                found.skipped.push(Unusable {
                    name,
                    reason: format!("{kind}, not a regular file: not read"),
                });
                continue;
            }
            Err(reason) => Err(anyhow::Error::msg(reason)),
        };
        match made {
            // A WGSL file without a compute entry is a module (B9): a
            // kernel's `#import` reaches it; it is no kernel, and no failure.
            Ok(file) if file.language == Language::Wgsl && file.entries.is_empty() => {
                found.skipped.push(Unusable {
                    name,
                    reason: "a WGSL module (no `@compute` function): built into the kernels \
                             that `#import` it"
                        .to_owned(),
                });
                modules.push(file);
            }
            Ok(file) => found.files.push(file),
            Err(reason) => found.failed.push(Unusable {
                name,
                reason: format!("{reason:#}"),
            }),
        }
    }
    for file in &mut found.files {
        if file.language == Language::Wgsl {
            file.modules = wgsl::imported_modules(&file.source, &modules);
        }
    }
    found
        .failed
        .sort_by(|left, right| left.name.cmp(&right.name));
    found
        .skipped
        .sort_by(|left, right| left.name.cmp(&right.name));
    Ok(found)
}

/// The kernel file `name` at `path`, holding `text`, as its header says.
fn kernel_file(name: String, path: &Path, language: Language, text: String) -> Result<KernelFile> {
    let header = header::parse(&text, language)?;
    let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let entries = match (header.entries, language) {
        (entries, _) if !entries.is_empty() => entries,
        (_, Language::Wgsl) => {
            // None: a module, which `find` lists as one.
            wgsl_compute_entries(&text)
        }
        _ => bail!("no `// kiln entry: <function>` line: CUDA and HIP files must name it"),
    };
    let mut specializations = header.specializations;
    if specializations.is_empty() {
        specializations.push(Specialization::default());
    }
    let mut includes = Vec::with_capacity(header.includes.len());
    for include in &header.includes {
        let path = folder.join(include);
        if !path.is_dir() {
            bail!(
                "`// kiln include: {include}`: there is no folder {}; name a folder that \
                 exists, relative to the file's folder",
                path.display()
            );
        }
        includes.push(path);
    }
    Ok(KernelFile {
        name,
        includes,
        defines: header.defines,
        stdlib: header.stdlib,
        folder,
        language,
        source: text.into(),
        module: None,
        entries,
        specializations,
        options: header.options,
        backends: header.backends,
        modules: Vec::new(),
    })
}

/// The `.spv` file `name` at `path`, holding `bytes`, as its sidecar says.
fn spirv_file(name: String, path: &Path, bytes: Vec<u8>) -> Result<KernelFile> {
    let mut sidecar_path = path.as_os_str().to_owned();
    sidecar_path.push(".kiln");
    let sidecar_path = PathBuf::from(sidecar_path);
    let sidecar_name = sidecar_path
        .file_name()
        .map(|file_name| file_name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let header = match sidecar(&sidecar_path) {
        Ok(None) => header::Header::default(),
        Ok(Some(text)) => header::parse(&text, Language::Spirv)
            .with_context(|| format!("its sidecar {sidecar_name}"))?,
        Err(reason) => bail!("its sidecar {sidecar_name}: {reason}"),
    };
    let entries = if header.entries.is_empty() {
        // naga's reason already names the module and what it refused.
        let entries =
            wgsl::spirv_compute_entries(&bytes).map_err(|failure| anyhow::anyhow!("{failure}"))?;
        if entries.is_empty() {
            bail!("no `GLCompute` entry point: nothing to build");
        }
        entries
    } else {
        header.entries
    };
    let mut specializations = header.specializations;
    if specializations.is_empty() {
        specializations.push(Specialization::default());
    }
    Ok(KernelFile {
        name,
        folder: path.parent().map(Path::to_path_buf).unwrap_or_default(),
        language: Language::Spirv,
        source: Arc::from(""),
        module: Some(bytes.into()),
        entries,
        specializations,
        includes: Vec::new(),
        options: Vec::new(),
        backends: None,
        defines: Vec::new(),
        stdlib: true,
        modules: Vec::new(),
    })
}

/// The text of the sidecar at `path`, `None` when there is none; read as a
/// kernel file is (no link, a regular file, at most [`MAX_FILE_BYTES`],
/// UTF-8), and else why not.
fn sidecar(path: &Path) -> Result<Option<String>, String> {
    match fs::symlink_metadata(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot be examined: {error}")),
        Ok(metadata) if metadata.file_type().is_symlink() => {
            return Err(
                "a symbolic link: not followed; put the header lines in a file there".to_owned(),
            );
        }
        Ok(_) => {}
    }
    match read_bounded(path)? {
        Contents::Bytes(bytes) => text_of(bytes).map(Some),
        // Building without the header it holds would build something
        // other than what it says.
        Contents::NotRegular(kind) => Err(format!(
            "{kind}, not a regular file: not read; make it a text file or remove it"
        )),
    }
}

/// The `@compute` functions of a WGSL text, in order, outside comments.
/// Only the function's name is read, so a text naga would refuse still
/// gives its entries, and fails when it compiles, with naga's message.
pub fn wgsl_compute_entries(text: &str) -> Vec<String> {
    let mut code = String::with_capacity(text.len());
    let mut rest = text;
    // Comments out, nested block comments as WGSL has them.
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.find('\n').map_or("", |end| &after[end..]);
        } else if rest.starts_with("/*") {
            let mut depth = 0usize;
            let mut index = 0;
            let bytes = rest.as_bytes();
            while index < bytes.len() {
                if bytes[index..].starts_with(b"/*") {
                    depth += 1;
                    index += 2;
                } else if bytes[index..].starts_with(b"*/") {
                    depth -= 1;
                    index += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    index += 1;
                }
            }
            code.push(' ');
            rest = rest.get(index..).unwrap_or("");
        } else {
            let character = rest.chars().next().unwrap_or(' ');
            code.push(character);
            rest = &rest[character.len_utf8()..];
        }
    }
    let mut entries = Vec::new();
    let mut remaining = code.as_str();
    while let Some(at) = remaining.find("@compute") {
        remaining = &remaining[at + "@compute".len()..];
        let Some(function) = remaining.find("fn") else {
            break;
        };
        let name: String = remaining[function + 2..]
            .trim_start()
            .chars()
            .take_while(|character| character.is_alphanumeric() || *character == '_')
            .collect();
        if !name.is_empty() && !entries.contains(&name) {
            entries.push(name);
        }
    }
    entries
}

/// Whether `path` is a `.cuh` header: walked, but a kernel file only when
/// it has a kiln header.
fn is_header_file(path: &Path) -> bool {
    path.extension().is_some_and(|extension| extension == "cuh")
}

fn relative_name(folder: &Path, path: &Path) -> String {
    path.strip_prefix(folder)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Collects the kernel files below `folder`, whose listing is `entries`,
/// into `paths`; notes what it leaves alone in `found`. Names are relative
/// to `root`.
fn walk(
    root: &Path,
    folder: &Path,
    entries: fs::ReadDir,
    visited: &mut HashSet<(u64, u64)>,
    paths: &mut Vec<(PathBuf, Language)>,
    found: &mut Found,
) {
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) => {
                found.failed.push(Unusable {
                    name: relative_name(root, folder),
                    reason: format!("a folder that cannot be listed: {error}"),
                });
                continue;
            }
        };
        let path = entry.path();
        let name = relative_name(root, &path);
        // The entry's own type: a link is a link here, never its target.
        let file_type = match entry.file_type() {
            Ok(file_type) => file_type,
            Err(error) => {
                found.failed.push(Unusable {
                    name,
                    reason: format!("cannot be examined: {error}"),
                });
                continue;
            }
        };
        let language = Language::of(&path);
        if file_type.is_symlink() {
            // Only links that could hold kernels are worth a note: ones
            // named like a kernel and ones to a folder. `metadata` follows
            // the link without opening its target, which cannot block.
            if language.is_some() || fs::metadata(&path).is_ok_and(|target| target.is_dir()) {
                found.skipped.push(Unusable {
                    name,
                    reason: "a symbolic link: not followed".to_owned(),
                });
            }
        } else if file_type.is_dir() {
            let metadata = match entry.metadata() {
                Ok(metadata) => metadata,
                Err(error) => {
                    found.failed.push(Unusable {
                        name,
                        reason: format!("a folder that cannot be examined: {error}"),
                    });
                    continue;
                }
            };
            if !visited.insert((metadata.dev(), metadata.ino())) {
                found.skipped.push(Unusable {
                    name,
                    reason: "a folder already searched (a mount loop): not searched again"
                        .to_owned(),
                });
                continue;
            }
            match fs::read_dir(&path) {
                Ok(entries) => walk(root, &path, entries, visited, paths, found),
                Err(error) => found.failed.push(Unusable {
                    name,
                    reason: format!("a folder that cannot be read: {error}"),
                }),
            }
        } else if let Some(language) = language {
            // FIFOs and device nodes go to the reader too, which opens
            // nothing it cannot read without blocking and notes them.
            paths.push((path, language));
        }
    }
}

/// What reading a kernel file gave.
enum Contents {
    /// Its bytes.
    Bytes(Vec<u8>),
    /// It is not a regular file: what it is.
    NotRegular(&'static str),
}

/// Reads the kernel file at `path`: only a regular file, only up to
/// [`MAX_FILE_BYTES`]. The error is the reason the file fails.
fn read_bounded(path: &Path) -> Result<Contents, String> {
    // Non-blocking: opening a FIFO for reading waits for a writer
    // otherwise. No following: the entry was a file when listed, and a
    // link put in its place since is not followed either.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|error| {
            if error.raw_os_error() == Some(libc::ELOOP) {
                "a symbolic link (put in place of a file): not followed".to_owned()
            } else {
                format!("cannot be opened: {error}")
            }
        })?;
    let metadata = file
        .metadata()
        .map_err(|error| format!("cannot be examined: {error}"))?;
    let file_type = metadata.file_type();
    if !file_type.is_file() {
        return Ok(Contents::NotRegular(if file_type.is_fifo() {
            "a FIFO"
        } else if file_type.is_char_device() {
            "a character device"
        } else if file_type.is_block_device() {
            "a block device"
        } else if file_type.is_socket() {
            "a socket"
        } else {
            "a special file"
        }));
    }
    let too_large = || {
        format!(
            "larger than {} MiB, the most kiln warm reads of a kernel file",
            MAX_FILE_BYTES >> 20
        )
    };
    if metadata.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    // The size was checked, but a file can grow while it is read.
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| format!("cannot be read: {error}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    Ok(Contents::Bytes(bytes))
}

/// The bytes as text: UTF-8 without NUL bytes, else why not, naming the
/// line.
fn text_of(bytes: Vec<u8>) -> Result<String, String> {
    fn line_of(bytes: &[u8], offset: usize) -> usize {
        bytes[..offset]
            .iter()
            .filter(|&&byte| byte == b'\n')
            .count()
            + 1
    }
    if let Some(offset) = bytes.iter().position(|&byte| byte == 0) {
        return Err(format!(
            "line {}: a NUL byte: kernel files are text, this looks binary",
            line_of(&bytes, offset)
        ));
    }
    String::from_utf8(bytes).map_err(|error| {
        let offset = error.utf8_error().valid_up_to();
        let bytes = error.as_bytes();
        format!(
            "line {}: byte 0x{:02x} is not UTF-8: kernel files are UTF-8 text (save it as \
             UTF-8, or spell the character in ASCII)",
            line_of(bytes, offset),
            bytes[offset]
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_is_not_utf8_names_its_line() {
        let error = text_of(b"// kiln entry: k\n// caf\xe9\n".to_vec()).expect_err("Latin-1");
        assert!(error.starts_with("line 2: byte 0xe9"), "{error}");
        let error = text_of(b"ok\n\0\x01".to_vec()).expect_err("binary");
        assert!(error.starts_with("line 2: a NUL byte"), "{error}");
    }

    // B6
    #[test]
    fn every_compute_entry_of_a_wgsl_text_is_found_outside_comments() {
        let text = "// @compute fn not_this() {}\n@compute @workgroup_size(64)\nfn first() {}\n\
                    /* @compute fn nor_this() {} */\n@compute\n@workgroup_size(1)\nfn second(\
                    @builtin(global_invocation_id) id: vec3<u32>) {}\n@vertex fn v() {}\n";
        assert_eq!(wgsl_compute_entries(text), ["first", "second"]);
    }
}
