//! How `kiln warm` finds kernels: source files whose header comment says
//! how to build them.
//!
//! # The header
//!
//! A kernel file (`*.wgsl`, `*.cu`, `*.hip`) starts with comment lines; the
//! ones of the form `// kiln <key>: <value>` are kiln's, every other comment
//! line is the author's. The header ends at the first line that is neither
//! blank nor a `//` comment.
//!
//! ```text
//! // kiln entry: main
//! // kiln specialize: WORKGROUP=64
//! // kiln specialize: WORKGROUP=256 LEAK=0.01
//! ```
//!
//! - `entry` names the function to launch: a `@compute` function in WGSL,
//!   a `__global__` function (or template instantiation) in CUDA and HIP.
//!   WGSL defaults to `main`; CUDA and HIP files must name it.
//! - each `specialize` line is one kernel built from the file: `NAME=VALUE`
//!   pairs, separated by spaces, set pipeline-overridable constants
//!   (`override NAME`) in WGSL and preprocessor definitions (`-DNAME=VALUE`)
//!   in CUDA and HIP. A file without one is one kernel with the defaults.
//!
//! A header comment, rather than a manifest beside the kernels, keeps a
//! kernel and how it is built in one file that can be copied alone, and
//! needs no TOML parser in the build.
//!
//! The text handed to the compiler is the file with kiln's own header lines
//! replaced by empty lines: a kernel carries neither its siblings'
//! `specialize` lines nor the cost of storing them, and the compiler's
//! line numbers still match the file.
//!
//! # The walk
//!
//! Bad input fails one file, never the run: a file that is not UTF-8 text,
//! is larger than [`MAX_FILE_BYTES`] or has a malformed header is listed as
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
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use kiln_core::define;

/// The language of a kernel file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// `*.wgsl`: the wgpu backend.
    Wgsl,
    /// `*.cu`: the CUDA backend, and HIP's (hipRTC takes CUDA's dialect).
    Cuda,
    /// `*.hip`: the HIP backend.
    Hip,
}

impl Language {
    fn of(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "wgsl" => Some(Self::Wgsl),
            "cu" => Some(Self::Cuda),
            "hip" => Some(Self::Hip),
            _ => None,
        }
    }
}

/// One `NAME=VALUE` set of a `specialize` line, in the order written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Specialization(pub Vec<(String, String)>);

impl fmt::Display for Specialization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self
            .0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        f.write_str(&pairs.join(" "))
    }
}

/// The largest kernel file read: a kernel file over it fails alone, and
/// no file named like a kernel can make the walk read without end.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// A kernel file and the kernels its header asks for.
#[derive(Debug, Clone)]
pub struct KernelFile {
    /// Its name relative to the folder searched, for labels and ids.
    pub name: String,
    /// Its language.
    pub language: Language,
    /// The text handed to the compiler: the file with kiln's header lines
    /// blanked, so each kernel carries only what its compile needs. Shared
    /// by every kernel of the file.
    pub source: Arc<str>,
    /// Where the code starts in `source`, past the header's blank and
    /// comment lines: a kernel's id covers the code alone, so editing the
    /// header (a `specialize` line added, a comment reworded) leaves the
    /// other kernels of the file found in the store.
    pub code_start: usize,
    /// The entry point.
    pub entry: String,
    /// One per kernel; one empty specialization when the header has none.
    pub specializations: Vec<Specialization>,
}

impl KernelFile {
    /// The label of the kernel made with `specialization`: `name [A=1 B=2]`.
    pub fn label(&self, specialization: &Specialization) -> String {
        if specialization.0.is_empty() {
            self.name.clone()
        } else {
            format!("{} [{specialization}]", self.name)
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
    for (path, language) in paths {
        let name = relative_name(folder, &path);
        match read_kernel_file(&path) {
            Ok(Contents::Text(text)) => match parse_header(&text, language) {
                Ok(header) => found.files.push(KernelFile {
                    name,
                    language,
                    source: header.source.into(),
                    code_start: header.code_start,
                    entry: header.entry,
                    specializations: header.specializations,
                }),
                Err(reason) => found.failed.push(Unusable {
                    name,
                    reason: format!("{reason:#}"),
                }),
            },
            Ok(Contents::NotRegular(kind)) => found.skipped.push(Unusable {
                name,
                reason: format!("{kind}, not a regular file: not read"),
            }),
            Err(reason) => found.failed.push(Unusable { name, reason }),
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
    /// Its text.
    Text(String),
    /// It is not a regular file: what it is.
    NotRegular(&'static str),
}

/// Reads the kernel file at `path`: only a regular file, only up to
/// [`MAX_FILE_BYTES`], only UTF-8 text. The error is the reason the file
/// fails.
fn read_kernel_file(path: &Path) -> Result<Contents, String> {
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
    text_of(bytes).map(Contents::Text)
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

/// What a file's header says, and the text to compile.
#[derive(Debug)]
struct Header {
    entry: String,
    specializations: Vec<Specialization>,
    /// The file with kiln's header lines blanked.
    source: String,
    /// Where the code starts in `source`: past the header, the leading
    /// block of blank and `//` comment lines.
    code_start: usize,
}

/// The entry point and specializations a file's header names.
fn parse_header(text: &str, language: Language) -> Result<Header> {
    let mut entry = None;
    let mut specializations = Vec::new();
    let mut source = String::with_capacity(text.len());
    let mut in_header = true;
    let mut code_start = None;
    for (index, raw_line) in text.split_inclusive('\n').enumerate() {
        let directive = in_header
            .then(|| header_directive(raw_line, &mut in_header))
            .flatten();
        if !in_header && code_start.is_none() {
            code_start = Some(source.len());
        }
        let Some(directive) = directive else {
            source.push_str(raw_line);
            continue;
        };
        // The line leaves the compiled text, its line ending stays, so the
        // compiler's line numbers are the file's.
        source.push_str(&raw_line[raw_line.trim_end_matches(['\r', '\n']).len()..]);
        let number = index + 1;
        let line = raw_line.trim();
        let Some((key, value)) = directive.split_once(':') else {
            bail!("line {number}: `{line}` has no `key: value`");
        };
        match key.trim() {
            "entry" => {
                let value = value.trim();
                if value.is_empty() {
                    bail!("line {number}: `{line}` names no function");
                }
                entry = Some(value.to_owned());
            }
            "specialize" => {
                let mut pairs = Vec::new();
                for pair in value.split_whitespace() {
                    let (name, value) = pair
                        .split_once('=')
                        .filter(|(name, value)| define::is_identifier(name) && !value.is_empty())
                        .with_context(|| {
                            format!(
                                "line {number}: `{line}`: `{pair}` is not NAME=VALUE (NAME a \
                                 letter or `_`, then letters, digits or `_`)"
                            )
                        })?;
                    pairs.push((name.to_owned(), value.to_owned()));
                }
                specializations.push(Specialization(pairs));
            }
            other => bail!(
                "line {number}: `{line}`: unknown key `{other}`; a kernel header knows `entry` \
                 and `specialize`"
            ),
        }
    }
    let entry = match (entry, language) {
        (Some(entry), _) => entry,
        (None, Language::Wgsl) => "main".to_owned(),
        (None, _) => bail!("no `// kiln entry: <function>` line: CUDA and HIP files must name it"),
    };
    if specializations.is_empty() {
        specializations.push(Specialization::default());
    }
    Ok(Header {
        entry,
        specializations,
        code_start: code_start.unwrap_or(source.len()),
        source,
    })
}

/// The text after `// kiln ` on a header line, or `None` for any other
/// line; clears `in_header` at the first line that is neither blank nor a
/// `//` comment.
fn header_directive<'a>(line: &'a str, in_header: &mut bool) -> Option<&'a str> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let Some(comment) = line.strip_prefix("//") else {
        *in_header = false;
        return None;
    };
    comment.trim().strip_prefix("kiln ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_the_entry_and_one_kernel_per_specialization() {
        let text = "// kiln entry: scale\n// what it does\n// kiln specialize: A=1 B=2.5\n\
                    // kiln specialize: A=2\n\n__global__ void scale() {}\n// kiln specialize: C=3\n";
        let header = parse_header(text, Language::Cuda).expect("a header");
        assert_eq!(header.entry, "scale");
        assert_eq!(
            header.specializations.len(),
            2,
            "lines after the header are code"
        );
        assert_eq!(header.specializations[0].to_string(), "A=1 B=2.5");
    }

    #[test]
    fn the_compiled_text_blanks_kiln_lines_and_keeps_line_numbers() {
        let text = "// kiln entry: scale\r\n// what it does\n// kiln specialize: A=1\n\
                    __global__ void scale() {}\n// kiln specialize: C=3";
        let header = parse_header(text, Language::Cuda).expect("a header");
        assert_eq!(
            header.source,
            "\r\n// what it does\n\n__global__ void scale() {}\n// kiln specialize: C=3"
        );
    }

    #[test]
    fn the_code_starts_past_the_header_block() {
        let text = "// kiln entry: scale\n// what it does\n\n// kiln specialize: A=1\n\
                    __global__ void scale() {}\n// a comment of the code\n";
        let header = parse_header(text, Language::Cuda).expect("a header");
        assert_eq!(
            &header.source[header.code_start..],
            "__global__ void scale() {}\n// a comment of the code\n"
        );
        let edited = "// kiln entry: scale\n// what it does, reworded\n// kiln specialize: A=1\n\
                      // kiln specialize: A=2\n__global__ void scale() {}\n// a comment of the code\n";
        let edited = parse_header(edited, Language::Cuda).expect("a header");
        assert_eq!(
            &edited.source[edited.code_start..],
            &header.source[header.code_start..]
        );
        let only_header = parse_header("// kiln entry: scale\n", Language::Cuda).expect("a header");
        assert_eq!(only_header.code_start, only_header.source.len());
    }

    #[test]
    fn wgsl_defaults_to_main_and_cuda_must_name_its_entry() {
        let header = parse_header("@compute fn main() {}", Language::Wgsl).expect("a header");
        assert_eq!(
            (header.entry.as_str(), header.specializations.len()),
            ("main", 1)
        );
        assert!(parse_header("__global__ void k() {}", Language::Cuda).is_err());
    }

    #[test]
    fn a_malformed_header_names_its_line() {
        let error = parse_header(
            "// kiln entry: main\n// kiln specialize: A\n",
            Language::Wgsl,
        )
        .expect_err("A is no pair");
        assert!(error.to_string().contains("line 2"), "{error}");
        let error = parse_header("// kiln colour: blue\n", Language::Wgsl).expect_err("no key");
        assert!(error.to_string().contains("colour"), "{error}");
    }

    #[test]
    fn a_specialized_name_must_be_an_identifier() {
        for line in [
            "-include=/etc/passwd",
            "1A=2",
            "A-B=1",
            "A=1 -include /etc/passwd",
        ] {
            let text = format!("// kiln entry: k\n// kiln specialize: {line}\n");
            let error = parse_header(&text, Language::Cuda).expect_err("no identifier");
            assert!(
                error
                    .to_string()
                    .contains(&format!("line 2: `// kiln specialize: {line}`")),
                "{error}"
            );
        }
        let header = parse_header("// kiln specialize: _A1=x-y\n", Language::Wgsl)
            .expect("an identifier and any value");
        assert_eq!(header.specializations[0].to_string(), "_A1=x-y");
    }

    #[test]
    fn text_that_is_not_utf8_names_its_line() {
        let error = text_of(b"// kiln entry: k\n// caf\xe9\n".to_vec()).expect_err("Latin-1");
        assert!(error.starts_with("line 2: byte 0xe9"), "{error}");
        let error = text_of(b"ok\n\0\x01".to_vec()).expect_err("binary");
        assert!(error.starts_with("line 2: a NUL byte"), "{error}");
    }
}
