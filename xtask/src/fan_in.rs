//! kiln-store's rooms read alone, checked by `cargo xtask lint`: no module
//! of `crates/kiln-store/src` is named by more than a third of its siblings
//! (ARCHITECTURE.md: "DiskStore is a composition of rooms").
//!
//! Every folder of the crate is counted on its own: the crate root and
//! each module folder (`disk/`, `pack/`, ...). Its modules are its files
//! and its module folders (a folder counts as one module, all its files
//! together), and its own `lib.rs` or `mod.rs`. A module names a sibling
//! when its code has `super::NAME` (with one more `super::` for each level
//! a file sits below the folder, and `super::{.., NAME, ..}` alike) or
//! `crate::PATH::NAME`; it names the folder's `mod.rs` (or `lib.rs`) when
//! it reaches an item that file defines or re-exports the same ways. A
//! glob import names the module it empties: `use super::*;` (with the
//! file's number of `super::`) or `use crate::PATH::*;` of the folder names
//! the folder's own file, since it brings in all that file defines and
//! imports, and `use super::NAME::*;` names the sibling `NAME`.
//!
//! Production code only: a `#[cfg(test)]` module, and any other item under
//! `#[cfg(test)]`, is left out, and so is every test-only file (one that a
//! `#[cfg(test)] mod NAME;` declares, and the files below it). Comments and
//! the contents of string literals do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::source::code_only;

/// The crate whose folders are counted.
const STORE_SOURCES: &str = "crates/kiln-store/src";

/// Fails when a module of kiln-store is named by more than a third of its
/// siblings, naming each one, its count and who names it.
pub fn check(root: &Path) -> Result<()> {
    let sources = root.join(STORE_SOURCES);
    let mut files = BTreeMap::new();
    read_sources(&sources, "", &mut files)?;
    if !files.contains_key("lib.rs") {
        bail!("{STORE_SOURCES}/lib.rs is missing: the fan-in check counts kiln-store's folders");
    }
    let over: Vec<String> = folders(&files)
        .iter()
        .flat_map(Folder::over_limit)
        .map(|line| format!("{STORE_SOURCES}/{line}"))
        .collect();
    if !over.is_empty() {
        bail!(
            "a kiln-store module is named by more than a third of its siblings (ARCHITECTURE.md: \
             \"DiskStore is a composition of rooms\"); move what they share into a module of \
             its own, or hand it over as a parameter:\n{}",
            over.join("\n")
        );
    }
    Ok(())
}

/// Every `.rs` file under `folder`, by its path below the crate's sources
/// (`/` between names), with its text.
fn read_sources(folder: &Path, below: &str, files: &mut BTreeMap<String, String>) -> Result<()> {
    let entries = std::fs::read_dir(folder)
        .with_context(|| format!("could not read {}", folder.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("could not read {}", folder.display()))?
            .path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        let relative = format!("{below}{name}");
        if path.is_dir() {
            read_sources(&path, &format!("{relative}/"), files)?;
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("could not read {}", path.display()))?;
            files.insert(relative, text);
        }
    }
    Ok(())
}

/// One folder's count.
#[derive(Debug)]
struct Folder {
    /// Each module (a file's stem, a folder's name, or the folder's own
    /// file: `lib.rs`, `mod.rs`, `NAME.rs`) with the siblings that name it.
    named_by: BTreeMap<String, BTreeSet<String>>,
    /// Each module's file or folder, below the crate's sources.
    shown: BTreeMap<String, String>,
}

impl Folder {
    /// How many siblings each module has.
    fn siblings(&self) -> usize {
        self.named_by.len().saturating_sub(1)
    }

    /// A line for each module named by more than a third of its siblings:
    /// its path, its count and who names it.
    fn over_limit(&self) -> Vec<String> {
        let siblings = self.siblings();
        self.named_by
            .iter()
            .filter(|(_, by)| by.len() * 3 > siblings)
            .map(|(module, by)| {
                format!(
                    "{}: named by {} of its {siblings} siblings (at most {}): {}",
                    self.shown.get(module).unwrap_or(module),
                    by.len(),
                    siblings / 3,
                    by.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect()
    }
}

/// The count of every folder of a crate's sources, `files` keyed by their
/// path below them (`lib.rs`, `disk/mod.rs`).
fn folders(files: &BTreeMap<String, String>) -> Vec<Folder> {
    let code: BTreeMap<&str, Production> = files
        .iter()
        .map(|(path, text)| (path.as_str(), production(text)))
        .collect();
    let test_only = test_only_files(&code);
    let code: BTreeMap<&str, String> = code
        .into_iter()
        .filter(|(path, _)| !test_only.contains(*path))
        .map(|(path, production)| (path, production.code))
        .collect();
    let mut found = Vec::new();
    if let Some(root) = code.get("lib.rs") {
        found.push(count(&code, "", "lib.rs", root));
    }
    for (path, text) in &code {
        if let Some(folder) = path.strip_suffix("/mod.rs") {
            found.push(count(&code, &format!("{folder}/"), "mod.rs", text));
        } else if *path != "lib.rs" {
            // `NAME.rs` beside a folder `NAME/` of its modules.
            let folder = format!("{}/", path.trim_end_matches(".rs"));
            let parent = path.rsplit('/').next().unwrap_or(path);
            if code.keys().any(|other| other.starts_with(&folder)) {
                found.push(count(&code, &folder, parent, text));
            }
        }
    }
    found
}

/// One folder's count: `folder` ends in `/` (empty for the crate root),
/// `parent` is the folder's own file (`lib.rs`, `mod.rs`, or `NAME.rs`
/// beside the folder) and `parent_code` that file's code.
fn count(code: &BTreeMap<&str, String>, folder: &str, parent: &str, parent_code: &str) -> Folder {
    // Each module and its files: a file of the folder, with everything
    // below it when it is a module folder.
    let mut modules: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
    let mut shown = BTreeMap::new();
    for (path, text) in code {
        let Some(below) = path.strip_prefix(folder) else {
            continue;
        };
        let module = match below.split_once('/') {
            Some((name, _)) => name,
            None if below == parent => continue,
            None => below.trim_end_matches(".rs"),
        };
        let module_file = format!("{folder}{module}.rs");
        let module_folder = format!("{folder}{module}/mod.rs");
        if code.contains_key(module_folder.as_str()) {
            shown.insert(module.to_owned(), format!("{folder}{module}/"));
        } else if code.contains_key(module_file.as_str()) {
            shown.insert(module.to_owned(), module_file);
        } else {
            continue;
        }
        modules
            .entry(module.to_owned())
            .or_default()
            .push((below, text.as_str()));
    }
    let own_file = match parent {
        "lib.rs" | "mod.rs" => format!("{folder}{parent}"),
        _ => format!("{}.rs", folder.trim_end_matches('/')),
    };
    shown.insert(parent.to_owned(), own_file);
    let parent_items: BTreeSet<String> = defined_in(parent_code)
        .into_iter()
        .filter(|item| !modules.contains_key(item))
        .collect();
    let crate_path = format!("crate::{}", folder.replace('/', "::"));
    let mut named_by: BTreeMap<String, BTreeSet<String>> = modules
        .keys()
        .chain([&parent.to_owned()])
        .map(|name| (name.clone(), BTreeSet::new()))
        .collect();
    let mut note = |by: &str, item: &str| {
        if item == GLOB && by != parent {
            named_by
                .entry(parent.to_owned())
                .or_default()
                .insert(by.to_owned());
        } else if modules.contains_key(item) && item != by {
            named_by
                .entry(item.to_owned())
                .or_default()
                .insert(by.to_owned());
        } else if parent_items.contains(item) && by != parent {
            named_by
                .entry(parent.to_owned())
                .or_default()
                .insert(by.to_owned());
        }
    };
    for (module, module_files) in &modules {
        for (below, text) in module_files {
            // `x.rs` and `x/mod.rs` are one level below the folder, `x/y.rs`
            // two: as many `super::` reach the folder.
            let levels = below.trim_end_matches("/mod.rs").split('/').count();
            for item in path_heads(text, &"super::".repeat(levels), true)
                .into_iter()
                .chain(path_heads(text, &crate_path, false))
            {
                note(module, &item);
            }
        }
    }
    // The parent reaches its own modules by plain paths, which say
    // nothing; only its `crate::PATH::` paths name one.
    for item in path_heads(parent_code, &crate_path, false) {
        note(parent, &item);
    }
    Folder { named_by, shown }
}

/// A file's production code (comments, literal contents and `#[cfg(test)]`
/// items blanked) and the modules it declares test-only.
struct Production {
    code: String,
    test_modules: Vec<String>,
    /// Whether the file says `#![cfg(test)]` of itself.
    test_only: bool,
}

/// `text`'s production code, and the names of the `#[cfg(test)] mod NAME;`
/// it declares.
fn production(text: &str) -> Production {
    let mut code: Vec<char> = code_only(text);
    let test_only = code
        .iter()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .contains("#![cfg(test)]");
    let mut test_modules = Vec::new();
    let mut index = 0;
    while let Some(start) = attribute_at(&code, index, "cfg(test)") {
        let (item_start, item_end) = item_after(&code, start);
        let item: String = code[item_start..item_end].iter().collect();
        if let Some(name) = declared_module(&item) {
            test_modules.push(name);
        }
        for c in &mut code[start..item_end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        index = item_end;
    }
    Production {
        code: code.into_iter().collect(),
        test_modules,
        test_only,
    }
}

/// Where the next `#[ATTRIBUTE]` (spaces aside) starts at or after `from`.
fn attribute_at(code: &[char], from: usize, attribute: &str) -> Option<usize> {
    let mut index = from;
    while index < code.len() {
        if code[index] == '#' {
            let end = attribute_end(code, index);
            if let Some(end) = end {
                let inside: String = code[index + 1..end]
                    .iter()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                if inside == format!("[{attribute}]") {
                    return Some(index);
                }
            }
        }
        index += 1;
    }
    None
}

/// The index after the `]` of the attribute whose `#` is at `start`, or
/// `None` when no `[` follows.
fn attribute_end(code: &[char], start: usize) -> Option<usize> {
    let open = start
        + 1
        + code[start + 1..]
            .iter()
            .take_while(|c| c.is_whitespace())
            .count();
    if code.get(open) != Some(&'[') {
        return None;
    }
    let mut depth = 0usize;
    for (offset, c) in code[open..].iter().enumerate() {
        match c {
            '[' => depth += 1,
            ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + offset + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The item an attribute at `start` stands before, as (start, end): after
/// any further attributes, to its `;` or `,`, or the `}` that closes it,
/// or before the bracket that closes what holds it.
fn item_after(code: &[char], start: usize) -> (usize, usize) {
    let mut index = start;
    while let Some(end) = code
        .get(index..)
        .and_then(|rest| rest.iter().position(|c| !c.is_whitespace()))
        .map(|offset| index + offset)
        .filter(|at| code[*at] == '#')
        .and_then(|at| attribute_end(code, at))
    {
        index = end;
    }
    let item_start = index;
    let mut depth = 0usize;
    // Generic arguments outside brackets (`HashMap<K, V>`), whose commas
    // do not end a field.
    let mut angles = 0usize;
    while index < code.len() {
        let arrow = index > 0 && matches!(code[index - 1], '-' | '=');
        match code[index] {
            '<' if depth == 0 => angles += 1,
            '>' if depth == 0 && !arrow => angles = angles.saturating_sub(1),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' if depth == 0 => return (item_start, index),
            ')' | ']' => depth -= 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return (item_start, index + 1);
                }
            }
            ';' if depth == 0 => return (item_start, index + 1),
            ',' if depth == 0 && angles == 0 => return (item_start, index + 1),
            _ => {}
        }
        index += 1;
    }
    (item_start, index)
}

/// `NAME` when `item` is `mod NAME;` (public or not).
fn declared_module(item: &str) -> Option<String> {
    let words: Vec<&str> = item
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ';'))
        .filter(|word| !word.is_empty())
        .collect();
    let at = words.iter().position(|word| *word == "mod")?;
    let name = words.get(at + 1)?.strip_suffix(';')?;
    let visibility_only = words[..at]
        .iter()
        .all(|word| matches!(*word, "pub" | "crate" | "super" | "self" | "in"));
    (visibility_only && at + 2 == words.len() && !name.is_empty()).then(|| name.to_owned())
}

/// The files only tests compile: those a `#[cfg(test)] mod NAME;` declares
/// or that say `#![cfg(test)]`, and every file below them.
fn test_only_files(code: &BTreeMap<&str, Production>) -> BTreeSet<String> {
    let mut test_only = BTreeSet::new();
    let mut take = |file: &str, folder: &str| {
        test_only.extend(
            code.keys()
                .filter(|other| **other == file || other.starts_with(folder))
                .map(|other| (*other).to_owned()),
        );
    };
    for (path, production) in code {
        // Where the modules a file declares live: beside a `lib.rs` or
        // `mod.rs`, in a folder of its name for any other file.
        let children = match path.rsplit_once('/') {
            Some((folder, "mod.rs")) => format!("{folder}/"),
            None if *path == "lib.rs" => String::new(),
            _ => format!("{}/", path.trim_end_matches(".rs")),
        };
        if production.test_only {
            take(path, &children);
        }
        for name in &production.test_modules {
            take(
                &format!("{children}{name}.rs"),
                &format!("{children}{name}/"),
            );
        }
    }
    test_only
}

/// The first name of every path that starts with `prefix` in `code`
/// (`prefix` `super::super::` finds `x` in `super::super::x::Y` and `a`
/// and `b` in `super::super::{a::C, b}`, [`GLOB`] in `super::super::*`).
/// With `supers`, `prefix` is a run of `super::` that must be whole:
/// `super::super::x` is not `super::x`.
fn path_heads(code: &str, prefix: &str, supers: bool) -> Vec<String> {
    let mut heads = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(offset) = code[from..].find(prefix) {
        let at = from + offset;
        from = at + prefix.len();
        // Not the tail of a longer name or path (`x::super::`).
        let joined = code[..at]
            .bytes()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':');
        if joined || (supers && code[from..].starts_with("super::")) {
            continue;
        }
        if bytes.get(from) == Some(&b'{') {
            heads.extend(group_heads(code, from));
        } else {
            heads.push(head(&code[from..]).to_owned());
        }
    }
    heads.retain(|head| !head.is_empty());
    heads
}

/// The first name of each path of the `{...}` group at `open`.
fn group_heads(code: &str, open: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut item_start = open + 1;
    for (offset, c) in code[open..].char_indices() {
        let at = open + offset;
        match c {
            '{' => depth += 1,
            '}' | ',' if depth == 1 => {
                heads.push(head(code[item_start..at].trim_start()).to_owned());
                item_start = at + 1;
                if c == '}' {
                    break;
                }
            }
            '}' => depth -= 1,
            _ => {}
        }
    }
    heads
}

/// What a path's head is when it is a glob: `super::*`, `crate::x::*`.
const GLOB: &str = "*";

/// The first name of the path `text` starts with: an identifier, or
/// [`GLOB`] (empty when neither).
fn head(text: &str) -> &str {
    if text.starts_with(GLOB) {
        GLOB
    } else {
        identifier(text)
    }
}

/// The identifier `text` starts with (empty when none).
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The names a file's code defines (`struct`, `enum`, `fn`, `type`,
/// `const`, `static`, `trait`, `union`, `macro_rules!`) or brings in with
/// `use` (the last name of each path, or its `as` name).
fn defined_in(code: &str) -> BTreeSet<String> {
    const DEFINERS: [&str; 9] = [
        "struct",
        "enum",
        "fn",
        "type",
        "const",
        "static",
        "trait",
        "union",
        "macro_rules!",
    ];
    let mut names = BTreeSet::new();
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
        .filter(|word| !word.is_empty())
        .collect();
    for pair in words.windows(2) {
        if DEFINERS.contains(&pair[0]) {
            names.insert(identifier(pair[1]).to_owned());
        }
    }
    let mut from = 0;
    while let Some(offset) = code[from..].find("use ") {
        let at = from + offset;
        from = at + 4;
        let starts_word = !code[..at]
            .bytes()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
        let Some(end) = code[from..].find(';').map(|end| from + end) else {
            break;
        };
        if starts_word {
            let statement = &code[from..end];
            let mut leaves: Vec<&str> = statement
                .split(['{', '}', ','])
                .filter_map(|part| part.split_whitespace().last())
                .map(|last| last.rsplit("::").next().unwrap_or(last))
                .collect();
            leaves.retain(|leaf| !leaf.is_empty() && identifier(leaf) == *leaf);
            names.extend(leaves.into_iter().map(str::to_owned));
        }
    }
    names.remove("");
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The modules of a crate made of `files` named at least once, each as
    /// `(its folder's own file, module, who names it)`.
    fn named(files: &[(&str, &str)]) -> Vec<(String, String, Vec<String>)> {
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
            .collect();
        let mut found = Vec::new();
        for folder in folders(&files) {
            let own = ["lib.rs", "mod.rs"]
                .iter()
                .find_map(|own| folder.shown.get(*own))
                .expect("a folder's own file");
            for (module, by) in &folder.named_by {
                if !by.is_empty() {
                    found.push((own.clone(), module.clone(), by.iter().cloned().collect()));
                }
            }
        }
        found
    }

    fn row(folder: &str, module: &str, by: &[&str]) -> (String, String, Vec<String>) {
        (
            folder.to_owned(),
            module.to_owned(),
            by.iter().map(|name| (*name).to_owned()).collect(),
        )
    }

    #[test]
    fn siblings_name_each_other_by_super_and_crate_paths() {
        let found = named(&[
            (
                "lib.rs",
                "mod a;\nmod b;\nmod c;\nmod d;\npub use d::Thing;\n",
            ),
            (
                "a.rs",
                "use crate::b::Bee;\nfn f() { crate::Thing::new(); }\n",
            ),
            ("b.rs", "use super::{c::See, d};\n"),
            (
                "c.rs",
                "// crate::d::Dee\nconst S: &str = \"crate::a::Ay\";\n",
            ),
            ("d.rs", "pub struct Thing;\n"),
        ]);
        assert_eq!(
            found,
            [
                row("lib.rs", "b", &["a"]),
                row("lib.rs", "c", &["b"]),
                row("lib.rs", "d", &["b"]),
                row("lib.rs", "lib.rs", &["a"]),
            ]
        );
    }

    #[test]
    fn a_file_below_a_module_folder_reaches_its_siblings_with_one_more_super() {
        let found = named(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a/mod.rs", "mod inner;\nuse super::b::Bee;\n"),
            // `super::super::` is a sibling of `a`; `super::` is `a` itself,
            // and three supers go past the root.
            (
                "a/inner.rs",
                "use super::super::c::See;\nuse super::Other;\nuse super::super::super::b;\n",
            ),
            ("b.rs", ""),
            ("c.rs", ""),
        ]);
        assert_eq!(
            found,
            [row("lib.rs", "b", &["a"]), row("lib.rs", "c", &["a"])]
        );
    }

    #[test]
    fn the_folder_s_own_items_name_its_mod_rs() {
        let found = named(&[
            ("lib.rs", "mod disk;\n"),
            (
                "disk/mod.rs",
                "mod read;\nmod write;\nmod open;\nuse crate::disk::open::Opened;\npub(crate) \
                 struct Inner;\npub use read::Reader as Read;\n",
            ),
            ("disk/read.rs", "use super::Inner;\n"),
            ("disk/write.rs", "use crate::disk::{Read, read::Reader};\n"),
            ("disk/open.rs", "pub struct Opened;\n"),
        ]);
        assert_eq!(
            found,
            [
                row("disk/mod.rs", "mod.rs", &["read", "write"]),
                row("disk/mod.rs", "open", &["mod.rs"]),
                row("disk/mod.rs", "read", &["write"]),
            ]
        );
    }

    #[test]
    fn a_glob_import_names_the_module_it_empties() {
        let found = named(&[
            ("lib.rs", "mod disk;\nmod pack;\nmod usage;\n"),
            (
                "disk/mod.rs",
                "mod read;\nmod write;\nmod open;\nmod evict;\nuse crate::usage::Usage;\n",
            ),
            // The parent's own file, by as many `super::` as the file is
            // deep or by its crate path; a sibling by its name.
            ("disk/read.rs", "use super::*;\n"),
            (
                "disk/write.rs",
                "use crate::disk::*;\nuse super::open::*;\n",
            ),
            ("disk/open.rs", "use super::{*, evict};\n"),
            ("disk/evict/mod.rs", "mod order;\n"),
            // One level further down: `super::super::*` is `disk/mod.rs`,
            // `super::*` is `evict/mod.rs`.
            (
                "disk/evict/order.rs",
                "use super::super::*;\nuse super::*;\n",
            ),
            ("pack.rs", "use crate::*;\n"),
            ("usage.rs", ""),
        ]);
        assert_eq!(
            found,
            [
                row("lib.rs", "lib.rs", &["pack"]),
                row("lib.rs", "usage", &["disk"]),
                row("disk/evict/mod.rs", "mod.rs", &["order"]),
                row("disk/mod.rs", "evict", &["open"]),
                row("disk/mod.rs", "mod.rs", &["evict", "open", "read", "write"]),
                row("disk/mod.rs", "open", &["write"]),
            ]
        );
    }

    #[test]
    fn test_modules_and_test_only_files_do_not_count() {
        let found = named(&[
            (
                "lib.rs",
                "mod a;\nmod b;\nmod c;\nmod d;\n#[cfg(test)]\nmod fixtures;\n#[cfg(test)]\nfn \
                 helper() { crate::b::f(); }\n",
            ),
            (
                "a.rs",
                "pub fn f() {}\n#[cfg(test)]\n#[allow(unused)]\nmod tests {\n    use \
                 super::super::b::f;\n    fn g() { if true { crate::b::f(); } }\n}\n",
            ),
            ("b/mod.rs", "#[cfg(test)]\nmod tests;\npub fn f() {}\n"),
            ("b/tests.rs", "use crate::a::f;\n"),
            ("fixtures.rs", "use crate::a::f;\nuse crate::b::f;\n"),
            ("d.rs", "#![cfg(test)]\nuse crate::a::f;\n"),
            // A test-only field ends at its own comma, generics aside.
            (
                "c.rs",
                "pub struct S {\n    #[cfg(test)]\n    seen: Map<u8, crate::a::Ay>,\n    kept: \
                 crate::b::Bee,\n}\n",
            ),
        ]);
        assert_eq!(found, [row("lib.rs", "b", &["c"])]);
    }

    #[test]
    fn a_module_named_by_a_third_of_its_siblings_passes() {
        // 7 siblings: 2 is within a third, 3 is over.
        let mut files = vec![(
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod f;\nmod g;\n",
        )];
        files.extend([
            ("a.rs", "use crate::g::G;\n"),
            ("b.rs", "use crate::g::G;\n"),
            ("c.rs", ""),
            ("d.rs", ""),
            ("e.rs", ""),
            ("f.rs", ""),
            ("g.rs", "pub struct G;\n"),
        ]);
        let files: BTreeMap<String, String> = files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned()))
            .collect();
        let folders = folders(&files);
        assert_eq!(folders.len(), 1);
        assert_eq!(folders[0].siblings(), 7);
        assert_eq!(folders[0].over_limit(), Vec::<String>::new());
    }

    #[test]
    fn a_module_named_by_more_than_a_third_of_its_siblings_fails_the_check() {
        let root = std::env::temp_dir().join(format!("kiln-fan-in-{}", std::process::id()));
        let disk = root.join(STORE_SOURCES).join("disk");
        std::fs::create_dir_all(&disk).expect("a scratch folder");
        let write = |path: &Path, text: &str| std::fs::write(path, text).expect("a scratch file");
        write(&root.join(STORE_SOURCES).join("lib.rs"), "mod disk;\n");
        write(
            &disk.join("mod.rs"),
            "mod read;\nmod write;\nmod open;\npub(crate) struct Inner;\n",
        );
        write(&disk.join("read.rs"), "use super::Inner;\n");
        write(&disk.join("write.rs"), "");
        write(&disk.join("open.rs"), "");
        let passed = check(&root);
        write(&disk.join("write.rs"), "fn f(inner: &super::Inner) {}\n");
        let refused = check(&root);
        drop(std::fs::remove_dir_all(&root));
        passed.expect("mod.rs is named by 1 of its 3 siblings");
        let refused = refused.expect_err("mod.rs is named by 2 of its 3 siblings");
        assert!(
            refused.to_string().contains(
                "crates/kiln-store/src/disk/mod.rs: named by 2 of its 3 siblings (at most 1): \
                 read, write"
            ),
            "{refused}"
        );
    }

    #[test]
    fn kiln_store_s_modules_are_each_named_by_at_most_a_third_of_their_siblings() {
        check(&crate::setup::workspace_root()).expect("the rooms read alone");
    }
}
