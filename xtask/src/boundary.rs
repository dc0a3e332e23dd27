//! The boundaries ARCHITECTURE.md states that a text search can hold,
//! checked by `cargo xtask lint`:
//!
//! - the command's backends are data: no module of `crates/kiln-tool/src`
//!   outside `backend/` names a backend crate (`kiln_cuda`, `kiln_hip`,
//!   `kiln_wgpu`) in its code. Comments and string literals do not count
//!   (a log target such as `"kiln_cuda::target"` is text, not a use).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::source::code_only;

/// The backend crates, as code names them.
const BACKEND_CRATES: [&str; 3] = ["kiln_cuda", "kiln_hip", "kiln_wgpu"];

/// The command's sources, and the one folder of them that may name a
/// backend.
const TOOL_SOURCES: &str = "crates/kiln-tool/src";
const TOOL_BACKENDS: &str = "crates/kiln-tool/src/backend";

/// Fails when a module of the command outside `backend/` names a backend
/// crate, naming each file and line.
pub fn check(root: &Path) -> Result<()> {
    let mut files = Vec::new();
    rust_files(&root.join(TOOL_SOURCES), &mut files)?;
    let backends = root.join(TOOL_BACKENDS);
    let mut found = Vec::new();
    for path in files.iter().filter(|path| !path.starts_with(&backends)) {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("could not read {}", path.display()))?;
        let shown = path.strip_prefix(root).unwrap_or(path);
        found.extend(
            backend_names(&text)
                .into_iter()
                .map(|(line, name)| format!("{}:{line}: {name}", shown.display())),
        );
    }
    if !found.is_empty() {
        bail!(
            "a kiln-tool module outside backend/ names a backend crate (ARCHITECTURE.md: \
             \"Backends are data\"); move that part into crates/kiln-tool/src/backend/:\n{}",
            found.join("\n")
        );
    }
    Ok(())
}

/// Every `.rs` file under `folder`, sorted.
fn rust_files(folder: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(folder)
        .with_context(|| format!("could not read {}", folder.display()))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("could not read {}", folder.display()))?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, files)?;
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// The lines (from 1) where `text`'s code names a backend crate, and the
/// name.
fn backend_names(text: &str) -> Vec<(usize, &'static str)> {
    let code: String = code_only(text).into_iter().collect();
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        for word in line.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if let Some(name) = BACKEND_CRATES.iter().find(|name| **name == word) {
                found.push((number + 1, *name));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_crate_in_code_is_found_with_its_line() {
        let text = "use std::path::Path;\nuse kiln_hip::HipOptions;\nfn f() { \
                    kiln_wgpu::worker_entry(); }\n";
        assert_eq!(backend_names(text), [(2, "kiln_hip"), (3, "kiln_wgpu")]);
    }

    #[test]
    fn comments_strings_and_longer_names_are_not_a_backend() {
        let text = "// kiln_cuda\n/* kiln_hip /* nested */ kiln_wgpu */\nlet target = \
                    \"kiln_cuda::target\";\nlet raw = r#\"kiln_hip \"quoted\"\"#;\nlet c = \
                    '\"'; let d = '\\''; fn e<'a>(x: &'a str) {}\nlet kiln_cuda_like = 1;\n\
                    let escaped = \"a \\\" kiln_wgpu\";\n";
        assert_eq!(backend_names(text), []);
        // The line numbers stay those of the text.
        let after = format!("{text}kiln_cuda::worker_entry();\n");
        assert_eq!(
            backend_names(&after),
            [(text.lines().count() + 1, "kiln_cuda")]
        );
    }

    #[test]
    fn a_module_outside_backend_that_names_one_fails_the_check() {
        let root = std::env::temp_dir().join(format!("kiln-boundary-{}", std::process::id()));
        let backends = root.join(TOOL_BACKENDS);
        std::fs::create_dir_all(&backends).expect("a scratch folder");
        std::fs::write(backends.join("cuda.rs"), "use kiln_cuda::CudaOptions;\n")
            .expect("a scratch file");
        check(&root).expect("backend/ may name a backend");
        let options = root.join(TOOL_SOURCES).join("options.rs");
        std::fs::write(&options, "// options\nuse kiln_cuda::CudaOptions;\n")
            .expect("a scratch file");
        let refused = check(&root).expect_err("options.rs names kiln_cuda");
        drop(std::fs::remove_dir_all(&root));
        assert!(
            refused
                .to_string()
                .contains("crates/kiln-tool/src/options.rs:2: kiln_cuda"),
            "{refused}"
        );
    }

    #[test]
    fn the_command_names_backends_only_in_its_backend_folder() {
        check(&crate::setup::workspace_root()).expect("the boundary holds");
    }
}
