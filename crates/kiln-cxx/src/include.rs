//! Includes resolved by kiln, not by the compiler (P13).
//!
//! A run-time compiler left to itself reads `#include "common.h"` from the
//! working directory and `<cuda_fp16.h>` from wherever its search path
//! points (hipRTC: `CPATH`, `CPLUS_INCLUDE_PATH` and the system's include
//! folder), and nothing it reads that way is in any key: an edited header
//! serves the old artifact, and one file compiles in one folder and fails
//! in another. So kiln reads the headers itself, hands each to the compiler
//! in memory (under the name the directive writes, which is how NVRTC and
//! hipRTC match them) and puts each one's text in the kernel's id and its
//! source key; the compiler is given no include path at all.
//!
//! The search is the C preprocessor's: a quoted include is looked for in
//! the including file's folder, then in the include folders, then in the
//! toolkit's; an angle include in the include folders, then the toolkit's.
//! Every directive of the text counts, whatever `#if` it sits under: a
//! header the text can reach is in the key even when this compile skips
//! it, a safe over-approximation.
//!
//! No include is ever left to the compiler's own search. One that no
//! folder holds is answered in memory too: a standard header by kiln's
//! stand-in ([`crate::stdlib`], B8), one of the compiler's own folders
//! (`hip/`) by the compiler's stand-in, and anything else by a header that
//! stops the compile with an `#error` naming it. Under a conditional (or in
//! a header reached only through one) that stand-in is harmless when the
//! branch is skipped (`#ifndef __CUDACC_RTC__ / #include <cstdio>` is
//! common); an unconditional one is an error at once, naming the folders
//! searched. Includes inside a toolkit header, whose conditionals name
//! headers of every host compiler, are the compiler's business: NVRTC
//! reads nothing from disk.
//!
//! A file found outside the kernel's tree (its source folder, or the
//! folder `kiln warm` was given), its include folders and the toolkit's is
//! refused before it is read, even under `#if 0`: `..` cannot leave the
//! tree, nor can a link, unless the search allows it. A computed include
//! (`#include HEADER`) cannot be followed without preprocessing, and is
//! refused.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use crate::Header;
use crate::stdlib::{self, Compiler, Known};

mod cache;

pub use cache::IncludeCache;

/// The most headers one kernel may reach: a search that finds more is
/// following something other than a kernel's includes.
pub const MAX_HEADERS: usize = 4096;

/// The largest header read.
pub const MAX_HEADER_BYTES: u64 = 8 << 20;

/// Where a kernel's includes are looked for: its own file's folder (for
/// quoted includes), the include folders in order, then the toolkit's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct IncludeSearch {
    /// The folder of the file whose text is compiled: quoted includes are
    /// looked for there first. `None` for a text that has no file.
    pub source_folder: Option<PathBuf>,
    /// The include folders, searched in order.
    pub folders: Vec<PathBuf>,
    /// The toolkit's include folders (CUDA's `cuda_fp16.h`,
    /// `cooperative_groups.h`, and CCCL's `cuda/std/...`), searched last.
    pub toolkit: Vec<PathBuf>,
    /// Folders of includes the compiler holds itself (`hip/` for hipRTC's
    /// `<hip/hip_runtime.h>`, quoted or angle): when no folder holds one,
    /// it is answered by [`compiler_headers`](Self::compiler_headers), or
    /// stops the compile naming it.
    pub compiler_folders: Vec<String>,
    /// Stand-ins for the compiler's own headers, by name.
    pub compiler_headers: Vec<Header>,
    /// The compiler, for the standard headers' stand-ins and the messages;
    /// `None`: no stand-in for a standard header.
    pub compiler: Option<Compiler>,
    /// Whether kiln's stand-ins for the standard headers are off (B8).
    pub stdlib_off: bool,
    /// The kernel's tree: a file found outside it, the include folders and
    /// the toolkit's is refused unread. `None`: the source folder.
    pub tree: Option<PathBuf>,
    /// Whether a file outside the tree may be read after all.
    pub outside_allowed: bool,
    /// Resolutions shared with other kernels' searches: `None` resolves
    /// every text afresh.
    pub cache: Option<IncludeCache>,
}

/// Why a kernel's includes could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IncludeError {
    /// `#include NAME` with a macro for a name.
    Computed {
        /// The file holding it, and its line.
        place: String,
        /// The directive as written.
        directive: String,
    },
    /// An include found in none of the folders searched.
    NotFound {
        /// The file holding it, and its line.
        place: String,
        /// The name included.
        name: String,
        /// Every folder looked in, in order.
        searched: Vec<PathBuf>,
        /// Whether to name the CUDA toolkit's variable in the hint.
        cuda: bool,
    },
    /// An include whose file is outside the kernel's tree and its include
    /// folders: refused, never read.
    Outside {
        /// The file holding it, and its line.
        place: String,
        /// The name included.
        name: String,
        /// Where it resolved.
        path: PathBuf,
    },
    /// A header only host code can use.
    HostOnly {
        /// The file holding it, and its line.
        place: String,
        /// What it is and how to leave it out.
        message: String,
    },
    /// An include by absolute path, which no search covers.
    Absolute {
        /// The file holding it, and its line.
        place: String,
        /// The name included.
        name: String,
    },
    /// One include name that means two different files: the compiler
    /// matches headers by name, so it could be given only one of them.
    Ambiguous {
        /// The name included.
        name: String,
        /// The two files.
        first: PathBuf,
        /// The two files.
        second: PathBuf,
    },
    /// A header that could not be read, or is no text.
    Unreadable {
        /// The header.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// More than [`MAX_HEADERS`] headers.
    TooMany,
}

impl fmt::Display for IncludeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Computed { place, directive } => write!(
                f,
                "{place}: `{directive}` computes the header's name, which kiln cannot follow \
                 to key its text; write the name in quotes or angle brackets"
            ),
            Self::NotFound {
                place,
                name,
                searched,
                cuda,
            } => {
                write!(f, "{place}: `{name}` is in no include folder: looked in ")?;
                if searched.is_empty() {
                    f.write_str("no folder (none given)")?;
                } else {
                    let folders: Vec<String> = searched
                        .iter()
                        .map(|folder| folder.display().to_string())
                        .collect();
                    f.write_str(&folders.join(", "))?;
                }
                f.write_str(
                    "; add the folder that holds it as an include folder (kiln warm: \
                     --include DIR or a `// kiln include: DIR` line; a program: the kernel \
                     builder's include_folder",
                )?;
                f.write_str(if *cuda {
                    "; the CUDA toolkit's: KILN_CUDA_INCLUDE)"
                } else {
                    ")"
                })
            }
            Self::Outside { place, name, path } => write!(
                f,
                "{place}: `{name}` resolves to {}, outside the kernel's folder and its include \
                 folders: kiln does not read it; add its folder as an include folder if it is \
                 meant (kiln warm: --include DIR, or --allow-outside-includes)",
                path.display()
            ),
            Self::HostOnly { place, message } => write!(f, "{place}: {message}"),
            Self::Absolute { place, name } => write!(
                f,
                "{place}: `{name}` is an absolute path; include it by a name relative to an \
                 include folder"
            ),
            Self::Ambiguous {
                name,
                first,
                second,
            } => write!(
                f,
                "`{name}` names two different headers, {} and {}: the compiler is handed \
                 headers by name, so it could see only one; include them by distinct names",
                first.display(),
                second.display()
            ),
            Self::Unreadable { path, reason } => {
                write!(f, "the header {} cannot be read: {reason}", path.display())
            }
            Self::TooMany => write!(
                f,
                "the includes reach more than {MAX_HEADERS} headers, the most kiln follows"
            ),
        }
    }
}

impl std::error::Error for IncludeError {}

/// One `#include` of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Directive {
    /// Its line, from 1.
    line: usize,
    /// What follows `include`: a quoted name, an angle name, or neither.
    target: Target,
    /// Whether it sits under a conditional other than the file's include
    /// guard.
    conditional: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Quoted(String),
    Angle(String),
    Computed(String),
}

/// A file whose includes are yet to be followed.
struct Pending {
    text: String,
    /// Its folder, where its quoted includes are looked for first.
    folder: Option<PathBuf>,
    /// How errors name it.
    label: String,
    /// Whether it is the toolkit's: its unresolved includes are the
    /// compiler's business.
    in_toolkit: bool,
    /// Whether it is reached only through a conditional directive: its
    /// own includes need not resolve.
    conditional: bool,
}

/// What an include no folder holds is answered with.
enum Answer {
    /// A stand-in header of this text, whose own includes are followed.
    StandIn(String),
    /// An error.
    Refused(IncludeError),
}

impl IncludeSearch {
    /// A search of `folders`, with no file folder and no toolkit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every header `text` can reach, each once, by the name its directive
    /// writes: `supplied` headers (given with their text) first, then
    /// files of the search. `label` names the text in errors.
    ///
    /// # Errors
    ///
    /// The first include that cannot be followed: see [`IncludeError`].
    pub fn resolve(
        &self,
        text: &str,
        label: &str,
        supplied: &[Header],
    ) -> Result<Vec<Header>, IncludeError> {
        match &self.cache {
            Some(cache) => cache.resolved(self, text, label, supplied, || {
                self.resolve_afresh(text, label, supplied)
            }),
            None => self.resolve_afresh(text, label, supplied),
        }
    }

    /// [`resolve`](Self::resolve), reading every file.
    fn resolve_afresh(
        &self,
        text: &str,
        label: &str,
        supplied: &[Header],
    ) -> Result<Vec<Header>, IncludeError> {
        let supplied_by_name: HashMap<&str, &Header> = supplied
            .iter()
            .map(|header| (header.name.as_str(), header))
            .collect();
        // Made at the first file found on disk: a text that includes none
        // (or only stand-ins) asks the file system nothing.
        let allowed = std::cell::OnceCell::new();
        // Name -> (the file it resolved to, when on disk): a name is handed
        // to the compiler once.
        let mut seen: HashMap<String, Option<PathBuf>> = HashMap::new();
        let mut headers = Vec::new();
        let mut pending = vec![Pending {
            text: text.to_owned(),
            folder: self.source_folder.clone(),
            label: label.to_owned(),
            in_toolkit: false,
            conditional: false,
        }];
        for header in supplied {
            seen.insert(header.name.clone(), None);
            pending.push(Pending {
                text: header.text.clone(),
                folder: None,
                label: header.name.clone(),
                in_toolkit: false,
                conditional: false,
            });
        }
        while let Some(file) = pending.pop() {
            for directive in directives(&file.text) {
                let place = format!("{} line {}", file.label, directive.line);
                let conditional = directive.conditional || file.conditional;
                let (name, quoted) = match directive.target {
                    Target::Quoted(name) => (name, true),
                    Target::Angle(name) => (name, false),
                    Target::Computed(_) if file.in_toolkit => continue,
                    Target::Computed(written) => {
                        return Err(IncludeError::Computed {
                            place,
                            directive: format!("#include {written}"),
                        });
                    }
                };
                if supplied_by_name.contains_key(name.as_str()) {
                    continue;
                }
                if Path::new(&name).is_absolute() {
                    if file.in_toolkit {
                        continue;
                    }
                    // A compiler opens an absolute name itself: no stand-in
                    // can answer it, so it is refused under any `#if`.
                    return Err(IncludeError::Absolute { place, name });
                }
                let searched = self.folders_for(file.folder.as_deref(), quoted);
                let found = searched
                    .iter()
                    .map(|(folder, in_toolkit)| (folder.join(&name), *in_toolkit))
                    .find(|(path, _)| path.is_file());
                let Some((path, in_toolkit)) = found else {
                    if file.in_toolkit || seen.contains_key(&name) {
                        continue;
                    }
                    let stand_in = match self.answer(&name, quoted, conditional, &place, &searched)
                    {
                        Answer::StandIn(text) => text,
                        Answer::Refused(error) => return Err(error),
                    };
                    if headers.len() >= MAX_HEADERS {
                        return Err(IncludeError::TooMany);
                    }
                    seen.insert(name.clone(), None);
                    headers.push(Header::new(name.clone(), stand_in.clone()));
                    pending.push(Pending {
                        text: stand_in,
                        folder: None,
                        label: name,
                        in_toolkit: false,
                        conditional,
                    });
                    continue;
                };
                let path = fs::canonicalize(&path).unwrap_or(path);
                if !self.outside_allowed
                    && !allowed
                        .get_or_init(|| self.allowed_roots())
                        .iter()
                        .any(|root: &PathBuf| path.starts_with(root))
                {
                    return Err(IncludeError::Outside { place, name, path });
                }
                if let Some(earlier) = seen.get(&name) {
                    match earlier {
                        Some(earlier) if *earlier != path => {
                            let text = read_header(&path)?;
                            let known = headers
                                .iter()
                                .find(|header: &&Header| header.name == name)
                                .map(|header| header.text.as_str());
                            if known != Some(text.as_str()) {
                                return Err(IncludeError::Ambiguous {
                                    name,
                                    first: earlier.clone(),
                                    second: path,
                                });
                            }
                        }
                        _ => {}
                    }
                    continue;
                }
                if headers.len() >= MAX_HEADERS {
                    return Err(IncludeError::TooMany);
                }
                let text = read_header(&path)?;
                seen.insert(name.clone(), Some(path.clone()));
                headers.push(Header::new(name, text.clone()));
                pending.push(Pending {
                    text,
                    folder: path.parent().map(Path::to_path_buf),
                    label: path.display().to_string(),
                    in_toolkit,
                    conditional,
                });
            }
        }
        // In name order: the same headers reached in another order are the
        // same key.
        headers.sort_by(|left, right| left.name.cmp(&right.name));
        Ok(headers)
    }

    /// The folders a file may be read from, canonical: the tree, the
    /// include folders and the toolkit's.
    fn allowed_roots(&self) -> Vec<PathBuf> {
        self.tree
            .iter()
            .chain(self.source_folder.iter().filter(|_| self.tree.is_none()))
            .chain(&self.folders)
            .chain(&self.toolkit)
            .map(|folder| fs::canonicalize(folder).unwrap_or_else(|_| folder.clone()))
            .collect()
    }

    /// What answers `name`, which no folder holds: a stand-in or an error
    /// (see the module's documentation).
    fn answer(
        &self,
        name: &str,
        quoted: bool,
        conditional: bool,
        place: &str,
        searched: &[(PathBuf, bool)],
    ) -> Answer {
        let compiler_name = self.compiler.map_or("the compiler", Compiler::name);
        let own = self
            .compiler_folders
            .iter()
            .any(|folder| name.starts_with(&format!("{folder}/")));
        if own {
            if let Some(header) = self
                .compiler_headers
                .iter()
                .find(|header| header.name == name)
            {
                return Answer::StandIn(header.text.clone());
            }
            return Answer::StandIn(stopping(&format!(
                "kiln: {name} is not among the headers {compiler_name} holds itself: add the \
                 folder that holds it as an include folder, so that kiln reads and keys it"
            )));
        }
        match (stdlib::classify(name), self.compiler) {
            (Some(Known::Standard(canonical)), Some(compiler)) if !self.stdlib_off => {
                if let Some(text) = stdlib::stand_in(canonical, compiler, &self.toolkit) {
                    return Answer::StandIn(text);
                }
            }
            (Some(Known::HostOnly(what)), Some(compiler)) => {
                let message = stdlib::host_only_message(name, what, compiler);
                return if conditional {
                    Answer::StandIn(stopping(&message))
                } else {
                    Answer::Refused(IncludeError::HostOnly {
                        place: place.to_owned(),
                        message,
                    })
                };
            }
            _ => {}
        }
        if conditional {
            let written = if quoted {
                format!("\"{name}\"")
            } else {
                format!("<{name}>")
            };
            return Answer::StandIn(stopping(&format!(
                "kiln: {written} is in no include folder kiln searched, and kiln leaves no \
                 include to {compiler_name}: add the folder that holds it as an include folder, \
                 or keep this include out of the compile"
            )));
        }
        Answer::Refused(IncludeError::NotFound {
            place: place.to_owned(),
            name: name.to_owned(),
            searched: searched.iter().map(|(folder, _)| folder.clone()).collect(),
            cuda: self.compiler != Some(Compiler::Hiprtc),
        })
    }

    /// The folders an include is looked for in, in order, each with
    /// whether it is the toolkit's.
    fn folders_for(&self, file_folder: Option<&Path>, quoted: bool) -> Vec<(PathBuf, bool)> {
        let mut folders = Vec::new();
        if quoted && let Some(folder) = file_folder {
            folders.push((folder.to_path_buf(), false));
        }
        folders.extend(self.folders.iter().map(|folder| (folder.clone(), false)));
        folders.extend(self.toolkit.iter().map(|folder| (folder.clone(), true)));
        folders
    }
}

/// A stand-in header that stops the compile that reads it with `message`.
fn stopping(message: &str) -> String {
    let message = message.replace(['"', '\\'], "'");
    format!("#error \"{message}\"\n")
}

/// Why an option that [names a file](names_a_file) is refused, for
/// `compiler` (`"NVRTC"`, `"hipRTC"`): the words after the option in each
/// backend's error.
pub fn why_no_file_option(compiler: &str) -> String {
    format!(
        "names a file or an include folder, which kiln never passes to {compiler}: headers are \
         found by kiln and handed over in memory"
    )
}

/// Whether a compiler option names a file or an include folder (`-I`,
/// `--include-path`, `-include`, `--pre-include`, `-isystem`, `-iquote`,
/// `-idirafter`, `-o`, dependency outputs): such an option would make the
/// compiler read or write behind the key, so no backend passes one on.
pub fn names_a_file(option: &str) -> bool {
    const PREFIXES: [&str; 12] = [
        "-I",
        "--include-path",
        "-include",
        "--include",
        "--pre-include",
        "-isystem",
        "-iquote",
        "-idirafter",
        "-imacros",
        "-M",
        "--dependency",
        "--output",
    ];
    let option = option.trim();
    option == "-o"
        || option.starts_with("-o=")
        || PREFIXES.iter().any(|prefix| option.starts_with(prefix))
}

fn read_header(path: &Path) -> Result<String, IncludeError> {
    let unreadable = |reason: String| IncludeError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    let metadata = fs::metadata(path).map_err(|error| unreadable(error.to_string()))?;
    if !metadata.is_file() {
        return Err(unreadable("not a regular file".to_owned()));
    }
    if metadata.len() > MAX_HEADER_BYTES {
        return Err(unreadable(format!(
            "larger than {} MiB, the most kiln reads of a header",
            MAX_HEADER_BYTES >> 20
        )));
    }
    let bytes = fs::read(path).map_err(|error| unreadable(error.to_string()))?;
    if bytes.contains(&0) {
        return Err(unreadable(
            "it holds a NUL byte: headers are text".to_owned(),
        ));
    }
    String::from_utf8(bytes).map_err(|_| unreadable("it is not UTF-8 text".to_owned()))
}

/// Every `#include` (and `#include_next`) of `text`, outside comments, with
/// whether it sits under a conditional other than an include guard.
fn directives(text: &str) -> Vec<Directive> {
    let mut found = Vec::new();
    let mut in_comment = false;
    // The conditional depth, and the depth that is the file's include
    // guard (`#ifndef X` then `#define X` as its first two directives).
    let mut depth = 0usize;
    let mut guard_depth = None;
    let mut directives_seen = 0usize;
    let mut guard_name: Option<String> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = strip_comments(raw, &mut in_comment);
        let Some(rest) = line.trim_start().strip_prefix('#') else {
            if !line.trim().is_empty() {
                directives_seen = directives_seen.max(2);
            }
            continue;
        };
        let rest = rest.trim_start();
        let word: String = rest
            .chars()
            .take_while(|character| character.is_ascii_alphanumeric() || *character == '_')
            .collect();
        let argument = rest[word.len()..].trim();
        directives_seen += 1;
        match word.as_str() {
            "if" | "ifdef" | "ifndef" => {
                depth += 1;
                if directives_seen == 1 && word == "ifndef" {
                    guard_name = Some(argument.to_owned());
                }
            }
            "define" if directives_seen == 2 => {
                if let Some(name) = guard_name.take()
                    && argument.split_whitespace().next() == Some(name.as_str())
                {
                    guard_depth = Some(1);
                }
            }
            "endif" => depth = depth.saturating_sub(1),
            "include" | "include_next" => {
                let conditional = depth > usize::from(guard_depth.is_some());
                let target = if let Some(quoted) = argument.strip_prefix('"') {
                    match quoted.split_once('"') {
                        Some((name, _)) => Target::Quoted(name.to_owned()),
                        None => Target::Computed(argument.to_owned()),
                    }
                } else if let Some(angle) = argument.strip_prefix('<') {
                    match angle.split_once('>') {
                        Some((name, _)) => Target::Angle(name.to_owned()),
                        None => Target::Computed(argument.to_owned()),
                    }
                } else {
                    Target::Computed(argument.to_owned())
                };
                found.push(Directive {
                    line: index + 1,
                    target,
                    conditional,
                });
            }
            _ => {}
        }
    }
    found
}

/// `line` without its comments; `in_comment` carries a block comment over
/// lines. String literals are not told apart: a `/*` inside one on a
/// directive line is vanishingly rare in kernels.
fn strip_comments(line: &str, in_comment: &mut bool) -> String {
    let mut kept = String::with_capacity(line.len());
    let mut rest = line;
    loop {
        if *in_comment {
            match rest.find("*/") {
                Some(end) => {
                    rest = &rest[end + 2..];
                    *in_comment = false;
                    kept.push(' ');
                }
                None => return kept,
            }
        } else {
            let block = rest.find("/*");
            let line_comment = rest.find("//");
            match (block, line_comment) {
                (Some(block), Some(line_comment)) if line_comment < block => {
                    kept.push_str(&rest[..line_comment]);
                    return kept;
                }
                (None, Some(line_comment)) => {
                    kept.push_str(&rest[..line_comment]);
                    return kept;
                }
                (Some(block), _) => {
                    kept.push_str(&rest[..block]);
                    rest = &rest[block + 2..];
                    *in_comment = true;
                }
                (None, None) => {
                    kept.push_str(rest);
                    return kept;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
