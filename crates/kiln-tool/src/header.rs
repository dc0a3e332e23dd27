//! A kernel file's kiln header: the `// kiln <key>: <value>` lines of its
//! first comment block, and nothing else of the file.
//!
//! The first comment block is everything before the first line of code:
//! blank lines, `//` lines and `/* ... */` blocks (a license above the
//! header is common). Its `// kiln` lines are kiln's; every other comment is
//! the author's. A `// kiln <key>:` line anywhere else is an error, never
//! ignored: a header line that kiln skipped would build something other
//! than what it says.
//!
//! The header is a comment, so the text compiled is the file exactly as it
//! is (P14): a program that compiles the same file (`include_str!`) with
//! the same defines compiles the same text, and finds what `kiln warm`
//! stored.

use anyhow::{Context, Result, bail};
use kiln_engine::define;

use crate::kernel::{Language, Specialization};

/// What a file's header says.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// The entries named, in order, each once; empty when none is named.
    pub entries: Vec<String>,
    /// One per `specialize` line, in order.
    pub specializations: Vec<Specialization>,
    /// The `include` folders, as written (relative to the file's folder).
    pub includes: Vec<String>,
    /// The `options`, as written.
    pub options: Vec<String>,
    /// The `backends` named, for a `.cu` file; `None` without the line.
    pub backends: Option<Vec<String>>,
    /// The `define` lines' `NAME=VALUE` pairs (a bare `NAME` defines it
    /// as 1), applied to every specialization, in order.
    pub defines: Vec<(String, String)>,
    /// Whether kiln's stand-ins for the standard headers are on (B8):
    /// `// kiln stdlib: off` turns them off.
    pub stdlib: bool,
}

impl Default for Header {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            specializations: Vec::new(),
            includes: Vec::new(),
            options: Vec::new(),
            backends: None,
            defines: Vec::new(),
            stdlib: true,
        }
    }
}

/// The keys a header knows.
const KEYS: &str = "`entry`, `specialize`, `define`, `include`, `options`, `stdlib` and `backends`";

/// Parses the header of `text`, a file of `language`.
///
/// # Errors
///
/// A malformed header line, a `// kiln` line outside the header, an entry
/// named twice, or a key that does not apply to the language; each names
/// its line.
pub fn parse(text: &str, language: Language) -> Result<Header> {
    let mut header = Header::default();
    let mut in_header = true;
    let mut in_block = false;
    for (index, raw_line) in text.lines().enumerate() {
        let number = index + 1;
        let line = raw_line.trim();
        if in_header {
            if in_block {
                in_block = !line.contains("*/");
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if let Some(block) = line.strip_prefix("/*") {
                match block.split_once("*/") {
                    None => in_block = true,
                    // Code after a one-line block ends the header.
                    Some((_, rest)) if !rest.trim().is_empty() => in_header = false,
                    Some(_) => {}
                }
                if in_header {
                    continue;
                }
            } else if let Some(comment) = line.strip_prefix("//") {
                if let Some(directive) = comment.trim().strip_prefix("kiln ") {
                    apply(&mut header, directive, line, number, language)?;
                }
                continue;
            } else if language == Language::Spirv {
                // A sidecar is all header: a line of anything else is a
                // mistake, never text to skip.
                bail!(
                    "line {number}: `{line}` is not a comment: a `.spv.kiln` file holds only \
                     `// kiln` header lines and comments"
                );
            } else {
                in_header = false;
            }
        }
        if is_kiln_line(line) {
            bail!(
                "line {number}: `{line}` is past the header: kiln reads its lines only from \
                 the comment block at the top of the file; move it there"
            );
        }
    }
    Ok(header)
}

/// Whether `text` has a kiln header line anywhere: a `.cuh` file without
/// one is a header, not a kernel file.
pub fn has_kiln_lines(text: &str) -> bool {
    text.lines().any(|line| is_kiln_line(line.trim()))
}

/// Whether `line` looks like a kiln header line: `// kiln <key>:`.
fn is_kiln_line(line: &str) -> bool {
    let Some(rest) = line
        .strip_prefix("//")
        .and_then(|comment| comment.trim_start().strip_prefix("kiln "))
    else {
        return false;
    };
    rest.split_once(':').is_some_and(|(key, _)| {
        let key = key.trim();
        !key.is_empty() && key.chars().all(|character| character.is_ascii_lowercase())
    })
}

fn apply(
    header: &mut Header,
    directive: &str,
    line: &str,
    number: usize,
    language: Language,
) -> Result<()> {
    let Some((key, value)) = directive.split_once(':') else {
        bail!("line {number}: `{line}` has no `key: value`");
    };
    let value = value.trim();
    match key.trim() {
        "entry" => {
            let names = entry_names(value);
            if names.is_empty() {
                bail!("line {number}: `{line}` names no function");
            }
            for name in names {
                if header.entries.contains(&name) {
                    bail!(
                        "line {number}: `{line}`: the entry `{name}` is named twice; name each \
                         entry once"
                    );
                }
                header.entries.push(name);
            }
        }
        "specialize" => {
            let mut pairs = Vec::new();
            for pair in value.split_whitespace() {
                let (name, constant) = pair
                    .split_once('=')
                    .filter(|(name, constant)| {
                        let named = define::is_identifier(name)
                            || (language.has_override_ids() && is_override_id(name));
                        named && !constant.is_empty()
                    })
                    .with_context(|| {
                        format!(
                            "line {number}: `{line}`: `{pair}` is not NAME=VALUE (NAME a letter \
                             or `_`, then letters, digits or `_`{})",
                            match language {
                                Language::Wgsl => "; or the number of an `@id(n)` override",
                                Language::Spirv => "; or the number of a `constant_id`",
                                Language::Cuda | Language::Hip => "",
                            }
                        )
                    })?;
                pairs.push((name.to_owned(), constant.to_owned()));
            }
            header.specializations.push(Specialization(pairs));
        }
        "include" | "options" | "backends" | "define" | "stdlib" if language.has_override_ids() => {
            bail!(
                "line {number}: `{line}`: `{}` is for CUDA and HIP files; a {} file has no \
             includes, defines or compiler options",
                key.trim(),
                if language == Language::Wgsl {
                    "WGSL"
                } else {
                    "SPIR-V"
                }
            )
        }
        "include" => {
            if value.is_empty() {
                bail!("line {number}: `{line}` names no folder");
            }
            header
                .includes
                .extend(value.split_whitespace().map(str::to_owned));
        }
        "options" => header
            .options
            .extend(value.split_whitespace().map(str::to_owned)),
        "define" => {
            if value.is_empty() {
                bail!("line {number}: `{line}` defines nothing; write NAME=VALUE");
            }
            for pair in value.split_whitespace() {
                let (name, constant) = pair.split_once('=').unwrap_or((pair, "1"));
                if !define::is_identifier(name) || constant.is_empty() {
                    bail!(
                        "line {number}: `{line}`: `{pair}` is not NAME=VALUE (NAME a letter or \
                         `_`, then letters, digits or `_`)"
                    );
                }
                header.defines.push((name.to_owned(), constant.to_owned()));
            }
        }
        "stdlib" => {
            header.stdlib = match value {
                "on" | "builtin" => true,
                "off" | "none" => false,
                _ => bail!(
                    "line {number}: `{line}`: write `on` (kiln's stand-ins for the standard \
                     headers, the default) or `off`"
                ),
            };
        }
        "backends" => {
            if language != Language::Cuda {
                bail!(
                    "line {number}: `{line}`: only a `.cu` file chooses its backends; a `.hip` \
                     file is always HIP's"
                );
            }
            let mut backends = Vec::new();
            for backend in value.split_whitespace() {
                if !matches!(backend, "cuda" | "hip") {
                    bail!(
                        "line {number}: `{line}`: `{backend}` is no backend of a `.cu` file; \
                         write `cuda`, `hip` or both"
                    );
                }
                backends.push(backend.to_owned());
            }
            if backends.is_empty() {
                bail!("line {number}: `{line}` names no backend");
            }
            header.backends = Some(backends);
        }
        other => {
            bail!("line {number}: `{line}`: unknown key `{other}`; a kernel header knows {KEYS}")
        }
    }
    Ok(())
}

/// Whether `name` is the number of a WGSL `@id(n)` override or a SPIR-V
/// `SpecId` (both 16 bits in wgpu).
fn is_override_id(name: &str) -> bool {
    !name.is_empty() && name.len() <= 5 && name.chars().all(|digit| digit.is_ascii_digit())
}

/// The entry names of an `entry` line: separated by spaces, except inside
/// a template's `<...>` or parentheses (`scale<float, 128>` is one name).
fn entry_names(value: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for character in value.chars() {
        match character {
            '<' | '(' => depth += 1,
            '>' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if character.is_whitespace() && depth == 0 {
            if !current.is_empty() {
                names.push(std::mem::take(&mut current));
            }
        } else {
            current.push(character);
        }
    }
    if !current.is_empty() {
        names.push(current);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_the_entries_and_one_kernel_per_specialization() {
        let text = "// kiln entry: scale\n// what it does\n// kiln specialize: A=1 B=2.5\n\
                    // kiln specialize: A=2\n\n__global__ void scale() {}\n";
        let header = parse(text, Language::Cuda).expect("a header");
        assert_eq!(header.entries, ["scale"]);
        assert_eq!(header.specializations.len(), 2);
        assert_eq!(header.specializations[0].to_string(), "A=1 B=2.5");
    }

    // B6
    #[test]
    fn several_entries_are_named_on_one_line_or_several_and_never_twice() {
        let text = "// kiln entry: forward backward\n// kiln entry: scale<float, 128> k<64>\n";
        let header = parse(text, Language::Cuda).expect("a header");
        assert_eq!(
            header.entries,
            ["forward", "backward", "scale<float, 128>", "k<64>"]
        );
        let error =
            parse("// kiln entry: a b\n// kiln entry: a\n", Language::Cuda).expect_err("a twice");
        assert!(error.to_string().contains("line 2"), "{error}");
        assert!(error.to_string().contains("named twice"), "{error}");
    }

    #[test]
    fn defines_apply_to_every_specialization_and_stdlib_turns_off() {
        let text = "// kiln entry: k\n// kiln define: TILE=16 FAST\n// kiln stdlib: off\n";
        let header = parse(text, Language::Cuda).expect("a header");
        assert_eq!(
            header.defines,
            [
                ("TILE".to_owned(), "16".to_owned()),
                ("FAST".to_owned(), "1".to_owned())
            ]
        );
        assert!(!header.stdlib);
        assert!(
            parse("// kiln entry: k\n", Language::Cuda)
                .expect("a header")
                .stdlib
        );
        let error = parse("// kiln define: 1A=2\n", Language::Hip).expect_err("no identifier");
        assert!(error.to_string().contains("line 1"), "{error}");
        let error = parse("// kiln stdlib: maybe\n", Language::Hip).expect_err("no switch");
        assert!(error.to_string().contains("`off`"), "{error}");
    }

    #[test]
    fn the_header_may_sit_under_a_license_block() {
        let text = "/*\n * Copyright the authors.\n * SPDX-License-Identifier: MIT\n */\n\n\
                    /* one more */\n// kiln entry: k\n// kiln include: ../include\n\
                    extern \"C\" __global__ void k() {}\n";
        let header = parse(text, Language::Cuda).expect("a header");
        assert_eq!(header.entries, ["k"]);
        assert_eq!(header.includes, ["../include"]);
    }

    #[test]
    fn a_kiln_line_past_the_header_is_an_error() {
        let text = "// kiln entry: k\n__global__ void k() {}\n// kiln specialize: C=3\n";
        let error = parse(text, Language::Cuda).expect_err("past the header");
        assert!(error.to_string().starts_with("line 3:"), "{error}");
        // A comment that merely mentions kiln is the author's.
        parse(
            "// kiln entry: k\nint x; // kiln is a cache\n// kiln of bricks\n",
            Language::Cuda,
        )
        .expect("no header line");
    }

    #[test]
    fn a_malformed_header_names_its_line() {
        let error = parse(
            "// kiln entry: main\n// kiln specialize: A\n",
            Language::Wgsl,
        )
        .expect_err("A is no pair");
        assert!(error.to_string().contains("line 2"), "{error}");
        let error = parse("// kiln colour: blue\n", Language::Wgsl).expect_err("no key");
        assert!(error.to_string().contains("colour"), "{error}");
        let error = parse("// kiln backends: cuda\n", Language::Hip).expect_err("hip");
        assert!(error.to_string().contains("only a `.cu`"), "{error}");
        let error = parse("// kiln backends: metal\n", Language::Cuda).expect_err("metal");
        assert!(error.to_string().contains("`metal`"), "{error}");
    }

    #[test]
    fn a_specialized_name_must_be_an_identifier_or_a_wgsl_override_number() {
        for line in [
            "-include=/etc/passwd",
            "1A=2",
            "A-B=1",
            "A=1 -include /etc/passwd",
        ] {
            let text = format!("// kiln entry: k\n// kiln specialize: {line}\n");
            let error = parse(&text, Language::Cuda).expect_err("no identifier");
            assert!(
                error
                    .to_string()
                    .contains(&format!("line 2: `// kiln specialize: {line}`")),
                "{error}"
            );
        }
        parse("// kiln specialize: 1300=1.1\n", Language::Cuda)
            .expect_err("a number is no C macro");
        let header = parse("// kiln specialize: 1300=1.1 _A1=x-y\n", Language::Wgsl)
            .expect("an override id and an identifier");
        assert_eq!(header.specializations[0].to_string(), "1300=1.1 _A1=x-y");
    }

    // B6: a `.spv.kiln` sidecar is all header, constants by number or name.
    #[test]
    fn a_sidecar_holds_only_comments_and_wgpu_keys() {
        let header = parse(
            "/* by glslang */\n// kiln entry: main\n\n// kiln specialize: 0=2 BIAS=1\n",
            Language::Spirv,
        )
        .expect("a sidecar");
        assert_eq!(header.entries, ["main"]);
        assert_eq!(header.specializations[0].to_string(), "0=2 BIAS=1");
        let error = parse("// kiln entry: main\nmain\n", Language::Spirv).expect_err("prose");
        assert!(
            error
                .to_string()
                .starts_with("line 2: `main` is not a comment"),
            "{error}"
        );
        let error = parse("// kiln include: inc\n", Language::Spirv).expect_err("include");
        assert!(error.to_string().contains("SPIR-V"), "{error}");
    }
}
