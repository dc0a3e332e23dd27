//! What the command line and the libraries say to a user names commands
//! (`kiln --help`, `kiln <command> --help`), never what only a checkout of
//! kiln's repository has: a file under `docs/`, the README, `cargo xtask`,
//! or a rule id such as "(P10)".
//!
//! Every string literal of every published crate's `src` (comments and the
//! test modules at the ends of files aside) is read, and so is the help of
//! every subcommand.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::KILN;

/// What names a part of the repository or a rule, in `text`: `None` when
/// nothing does.
fn repository_reference(text: &str) -> Option<&'static str> {
    for (needle, what) in [
        ("docs/", "a path under docs/"),
        ("README", "the README"),
        ("xtask", "cargo xtask"),
    ] {
        if text.contains(needle) {
            return Some(what);
        }
    }
    let bytes = text.as_bytes();
    for start in 0..bytes.len() {
        // `(` + a rule family's letter + digits + an optional letter + `)`.
        if bytes[start] != b'('
            || !matches!(
                bytes.get(start + 1),
                Some(b'L' | b'S' | b'D' | b'K' | b'P' | b'B' | b'T' | b'F')
            )
        {
            continue;
        }
        let digits = bytes[start + 2..]
            .iter()
            .take_while(|byte| byte.is_ascii_digit())
            .count();
        if digits == 0 {
            continue;
        }
        let mut end = start + 2 + digits;
        if bytes.get(end).is_some_and(u8::is_ascii_lowercase) {
            end += 1;
        }
        if bytes.get(end) == Some(&b')') {
            return Some("a rule id");
        }
    }
    None
}

/// The string literals of Rust `source`, each with the line it starts on,
/// up to the first `#[cfg(test)]`: comments, char literals and lifetimes
/// skipped, raw strings read whole. A literal right after `include_str!(`
/// is a path the build reads, not a message.
fn string_literals(source: &str) -> Vec<(usize, String)> {
    let source = source.split("\n#[cfg(test)]").next().unwrap_or(source);
    let chars: Vec<char> = source.chars().collect();
    let mut found = Vec::new();
    let mut line = 1;
    let mut at = 0;
    let preceded_by = |at: usize, text: &str| {
        let before: String = chars[at.saturating_sub(text.len())..at].iter().collect();
        before == text
    };
    while at < chars.len() {
        let here = chars[at];
        let next = chars.get(at + 1).copied();
        if here == '\n' {
            line += 1;
            at += 1;
        } else if here == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if here == '/' && next == Some('*') {
            at += 2;
            while at + 1 < chars.len() && !(chars[at] == '*' && chars[at + 1] == '/') {
                line += usize::from(chars[at] == '\n');
                at += 1;
            }
            at += 2;
        } else if here == '\'' {
            // A char literal is `'x'` or `'\...'`; anything else is a
            // lifetime or a label.
            if next == Some('\\') {
                at += 2;
                while at < chars.len() && chars[at] != '\'' {
                    at += 1;
                }
                at += 1;
            } else if chars.get(at + 2) == Some(&'\'') {
                at += 3;
            } else {
                at += 1;
            }
        } else if here == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars
                .get(at.wrapping_sub(1))
                .is_some_and(|before| before.is_alphanumeric() || *before == '_')
        {
            let hashes = chars[at + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(at + 1 + hashes) != Some(&'"') {
                at += 1;
                continue;
            }
            let start_line = line;
            let mut text = String::new();
            at += 2 + hashes;
            let closing: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while at < chars.len() {
                let rest: String = chars[at..(at + closing.len()).min(chars.len())]
                    .iter()
                    .collect();
                if rest == closing {
                    at += closing.len();
                    break;
                }
                line += usize::from(chars[at] == '\n');
                text.push(chars[at]);
                at += 1;
            }
            found.push((start_line, text));
        } else if here == '"' {
            let is_path = preceded_by(at, "include_str!(") || preceded_by(at, "include_bytes!(");
            let start_line = line;
            let mut text = String::new();
            at += 1;
            while at < chars.len() && chars[at] != '"' {
                if chars[at] == '\\' {
                    // A line continuation joins the next line's text.
                    if chars.get(at + 1) == Some(&'\n') {
                        line += 1;
                        at += 2;
                        while at < chars.len() && chars[at].is_whitespace() {
                            line += usize::from(chars[at] == '\n');
                            at += 1;
                        }
                        continue;
                    }
                    text.push(chars[at]);
                    at += 1;
                }
                line += usize::from(chars[at] == '\n');
                text.push(chars[at]);
                at += 1;
            }
            at += 1;
            if !is_path {
                found.push((start_line, text));
            }
        } else {
            at += 1;
        }
    }
    found
}

/// The `.rs` files under `folder`, at any depth.
fn rust_files(folder: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_scanner_finds_references_in_strings_and_not_in_comments() {
    let source = "// see docs/FLEET.md\n/// (P10)\nfn f<'a>(c: char) -> &'a str {\n    \
                  let _ = '\"';\n    bail!(\"install it (cargo xtask \\\n     setup)\");\n    \
                  let _ = include_str!(\"../README.md\");\n    r#\"a \"quoted\" (L5e)\"#\n}\n\
                  #[cfg(test)]\nmod tests { const A: &str = \"docs/\"; }\n";
    let literals = string_literals(source);
    let flagged: Vec<(usize, &str)> = literals
        .iter()
        .filter_map(|(line, text)| repository_reference(text).map(|what| (*line, what)))
        .collect();
    assert_eq!(
        flagged,
        [(5, "cargo xtask"), (8, "a rule id")],
        "{literals:?}"
    );
    assert_eq!(
        repository_reference("(P1, P2)"),
        None,
        "only one id alone is matched"
    );
    assert_eq!(repository_reference("a (P1) b"), Some("a rule id"));
    assert_eq!(repository_reference("Press (Ctrl) or (P)"), None);
}

#[test]
fn no_message_of_the_command_line_or_the_libraries_names_the_repository_or_a_rule() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for group in ["crates", "backends"] {
        let Ok(crates) = fs::read_dir(root.join(group)) else {
            panic!("no {group} folder at {}", root.display());
        };
        for member in crates.flatten() {
            // The tests' own helpers are never published.
            if member.file_name() != "kiln-test-support" {
                rust_files(&member.path().join("src"), &mut files);
            }
        }
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut offences = Vec::new();
    for file in &files {
        // A whole file of tests (`tests.rs`, `*_tests.rs`, declared under
        // `#[cfg(test)]`) says nothing to a user.
        let name = file
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let source = fs::read_to_string(file).expect("a source file");
        for (line, text) in string_literals(&source) {
            if let Some(what) = repository_reference(&text) {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                offences.push(format!("{shown}:{line}: names {what}: {text:?}"));
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn no_help_names_the_repository_or_a_rule() {
    let help = |arguments: &[&str]| {
        let output = Command::new(KILN)
            .args(arguments)
            .output()
            .expect("kiln runs");
        assert!(output.status.success(), "{arguments:?}: {output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    let top = help(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // A command's name starts its line two spaces in; a description
        // wrapped onto the next line is indented further.
        .filter(|line| !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|command| command != "help")
        .collect();
    assert!(commands.len() >= 10, "{commands:?} in {top}");
    let mut offences = Vec::new();
    for (command, text) in std::iter::once((String::from("kiln"), top.clone())).chain(
        commands
            .iter()
            .map(|command| (format!("kiln {command}"), help(&[command, "--help"]))),
    ) {
        for line in text.lines() {
            if let Some(what) = repository_reference(line) {
                offences.push(format!("{command} --help names {what}: {line}"));
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

#[test]
fn a_mistyped_subcommand_is_answered_with_the_one_meant() {
    let output = Command::new(KILN).arg("stast").output().expect("kiln runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("a similar subcommand exists: 'stats'"),
        "{stderr}"
    );
}
