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

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

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

/// A kernel file and the kernels its header asks for.
#[derive(Debug, Clone)]
pub struct KernelFile {
    /// Its name relative to the folder searched, for labels and ids.
    pub name: String,
    /// Its language.
    pub language: Language,
    /// The whole text.
    pub text: String,
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

/// Every kernel file under `folder` (searched recursively, in name order).
///
/// # Errors
///
/// The folder cannot be read, or a kernel file's header is malformed (the
/// error names the file and line).
pub fn find(folder: &Path) -> Result<Vec<KernelFile>> {
    let mut paths = Vec::new();
    collect(folder, &mut paths)?;
    paths.sort();
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let Some(language) = Language::of(&path) else {
            continue;
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let name = path
            .strip_prefix(folder)
            .unwrap_or(&path)
            .display()
            .to_string();
        let (entry, specializations) =
            parse_header(&text, language).with_context(|| format!("in {}", path.display()))?;
        files.push(KernelFile {
            name,
            language,
            text,
            entry,
            specializations,
        });
    }
    Ok(files)
}

fn collect(folder: &Path, paths: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(folder).with_context(|| format!("reading {}", folder.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", folder.display()))?
            .path();
        if path.is_dir() {
            collect(&path, paths)?;
        } else {
            paths.push(path);
        }
    }
    Ok(())
}

/// The entry point and specializations a file's header names.
fn parse_header(text: &str, language: Language) -> Result<(String, Vec<Specialization>)> {
    let mut entry = None;
    let mut specializations = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some(comment) = line.strip_prefix("//") else {
            break;
        };
        let Some(directive) = comment.trim().strip_prefix("kiln ") else {
            continue;
        };
        let number = index + 1;
        let Some((key, value)) = directive.split_once(':') else {
            bail!("line {number}: `// kiln {directive}` has no `key: value`");
        };
        match key.trim() {
            "entry" => {
                let value = value.trim();
                if value.is_empty() {
                    bail!("line {number}: `// kiln entry:` names no function");
                }
                entry = Some(value.to_owned());
            }
            "specialize" => {
                let mut pairs = Vec::new();
                for pair in value.split_whitespace() {
                    let Some((name, value)) = pair.split_once('=') else {
                        bail!("line {number}: `{pair}` is not NAME=VALUE");
                    };
                    if name.is_empty() || value.is_empty() {
                        bail!("line {number}: `{pair}` is not NAME=VALUE");
                    }
                    pairs.push((name.to_owned(), value.to_owned()));
                }
                specializations.push(Specialization(pairs));
            }
            other => bail!(
                "line {number}: unknown key `{other}`; a kernel header knows `entry` and \
                 `specialize`"
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
    Ok((entry, specializations))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_the_entry_and_one_kernel_per_specialization() {
        let text = "// kiln entry: scale\n// what it does\n// kiln specialize: A=1 B=2.5\n\
                    // kiln specialize: A=2\n\n__global__ void scale() {}\n// kiln specialize: C=3\n";
        let (entry, specializations) = parse_header(text, Language::Cuda).expect("a header");
        assert_eq!(entry, "scale");
        assert_eq!(specializations.len(), 2, "lines after the header are code");
        assert_eq!(specializations[0].to_string(), "A=1 B=2.5");
    }

    #[test]
    fn wgsl_defaults_to_main_and_cuda_must_name_its_entry() {
        let (entry, specializations) =
            parse_header("@compute fn main() {}", Language::Wgsl).expect("a header");
        assert_eq!((entry.as_str(), specializations.len()), ("main", 1));
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
}
