//! The facade's public surface, listed from its source and kiln-engine's,
//! without rustdoc: `cargo xtask facade-api` prints it, `--write` keeps it
//! in `crates/kiln/public-api.txt`, and `cargo xtask lint` fails when the
//! kept list and the code differ, so that a change to what users get is
//! seen in review.
//!
//! Each line is one public path of the library `kiln` (a module, an item, a
//! macro), with the features it needs in brackets. A module of kiln-engine
//! the facade re-exports is listed with everything public in it; another
//! crate re-exported whole (`kiln::disk`, a backend) is one line, `=` its
//! crate: its surface is that crate's own. Items of a `#[cfg(test)]` or
//! `#[cfg(doctest)]` and `#[doc(hidden)]` ones are not the surface; methods
//! are not listed (they come with their type).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::source::code_only;

/// The kept list, from the workspace's root.
const KEPT: &str = "crates/kiln/public-api.txt";

/// The crates whose modules are listed whole when re-exported: their name
/// in code and their root file.
const LOCAL_CRATES: [(&str, &str); 2] = [
    ("kiln", "crates/kiln/src/lib.rs"),
    ("kiln_engine", "crates/kiln-engine/src/lib.rs"),
];

/// `cargo xtask facade-api [--write]`.
pub fn run(root: &Path, arguments: &[&str]) -> Result<()> {
    let listed = listing(root)?;
    match arguments {
        [] => {
            print!("{listed}");
            Ok(())
        }
        ["--write"] => {
            let path = root.join(KEPT);
            std::fs::write(&path, &listed)
                .with_context(|| format!("could not write {}", path.display()))?;
            println!(
                "{} public items of kiln written to {KEPT}",
                listed.lines().count()
            );
            Ok(())
        }
        _ => bail!("usage: cargo xtask facade-api [--write]"),
    }
}

/// Fails when the kept list is not the facade's surface.
pub fn check(root: &Path) -> Result<()> {
    let listed = listing(root)?;
    let path = root.join(KEPT);
    let kept = std::fs::read_to_string(&path).unwrap_or_default();
    if kept == listed {
        return Ok(());
    }
    let kept_lines: BTreeSet<&str> = kept.lines().collect();
    let listed_lines: BTreeSet<&str> = listed.lines().collect();
    let mut changes: Vec<String> = listed_lines
        .difference(&kept_lines)
        .map(|line| format!("+ {line}"))
        .collect();
    changes.extend(
        kept_lines
            .difference(&listed_lines)
            .map(|line| format!("- {line}")),
    );
    bail!(
        "the facade's public surface is not the one {KEPT} lists; if the change is meant, run \
         `cargo xtask facade-api --write` and commit the list:\n{}",
        changes.join("\n")
    )
}

/// The facade's surface, one sorted line a path.
fn listing(root: &Path) -> Result<String> {
    let mut lines = BTreeSet::new();
    let mut reader = Reader {
        root: root.to_path_buf(),
        lines: &mut lines,
        depth: 0,
        macros: std::collections::BTreeMap::new(),
    };
    reader.module(
        &root.join(LOCAL_CRATES[0].1),
        true,
        "kiln",
        &BTreeSet::new(),
    )?;
    Ok(lines.into_iter().map(|line| line + "\n").collect())
}

/// A walk over the modules a surface reaches.
struct Reader<'a> {
    root: PathBuf,
    lines: &'a mut BTreeSet<String>,
    /// How deep the walk is: a cycle of re-exports stops it.
    depth: usize,
    /// The exported macros of each local crate read so far, by root file.
    macros: std::collections::BTreeMap<PathBuf, BTreeSet<String>>,
}

/// One public item of a module's text: its kind, the text after its kind
/// (a `use` tree, or a name and what follows) and the features it needs.
struct Item {
    kind: String,
    rest: String,
    features: BTreeSet<String>,
    /// The text inside the braces of an inline module.
    body: Option<String>,
}

impl Reader<'_> {
    /// Lists the public items of the module in `file` under `path`; `is_root`
    /// when the file is a crate's root or a `mod.rs`, whose children sit
    /// beside it.
    fn module(
        &mut self,
        file: &Path,
        is_root: bool,
        path: &str,
        features: &BTreeSet<String>,
    ) -> Result<()> {
        self.depth += 1;
        if self.depth > 16 {
            bail!("{path}: re-exports nest deeper than 16 modules");
        }
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("could not read {}", file.display()))?;
        let children = if is_root {
            file.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            file.with_extension("")
        };
        self.module_text(&text, &children, path, features)?;
        self.depth -= 1;
        Ok(())
    }

    /// Lists the public items of a module's `text`, whose child modules'
    /// files are in `children`, under `path`.
    fn module_text(
        &mut self,
        text: &str,
        children: &Path,
        path: &str,
        features: &BTreeSet<String>,
    ) -> Result<()> {
        for item in items(text) {
            let mut features = features.clone();
            features.extend(item.features.iter().cloned());
            match item.kind.as_str() {
                "use" => self.reexport(&item.rest, children, path, &features)?,
                "mod" => {
                    let name = leading_name(&item.rest);
                    let inner = format!("{path}::{name}");
                    self.add(&inner, &features);
                    match &item.body {
                        Some(body) => {
                            self.module_text(body, &children.join(&name), &inner, &features)?;
                        }
                        None => {
                            let (file, is_root) = module_file(children, &name);
                            self.module(&file, is_root, &inner, &features)?;
                        }
                    }
                }
                "macro" => {
                    // An exported macro is the crate's, wherever it is written.
                    let krate = path.split("::").next().unwrap_or(path);
                    self.add(
                        &format!("{krate}::{}!", leading_name(&item.rest)),
                        &features,
                    );
                }
                _ => self.add(&format!("{path}::{}", leading_name(&item.rest)), &features),
            }
        }
        Ok(())
    }

    /// Lists what `pub use TREE` makes public in the module at `path`,
    /// whose children are in `children`.
    fn reexport(
        &mut self,
        tree: &str,
        children: &Path,
        path: &str,
        features: &BTreeSet<String>,
    ) -> Result<()> {
        for (segments, name) in use_leaves(tree) {
            let Some((first, _)) = segments.split_first() else {
                continue;
            };
            // Where the path starts: a local crate, this crate, or a module
            // of this one.
            let start = LOCAL_CRATES
                .iter()
                .find(|(krate, _)| krate == first)
                .map(|(_, file)| (self.root.join(file), true, 1))
                .or_else(|| {
                    (first == "crate").then(|| {
                        let krate = path.split("::").next().unwrap_or(path);
                        let file = LOCAL_CRATES
                            .iter()
                            .find(|(name, _)| *name == krate)
                            .map_or_else(PathBuf::new, |(_, file)| self.root.join(file));
                        (file, true, 1)
                    })
                })
                .or_else(|| {
                    let (file, is_root) = module_file(children, first);
                    file.exists().then_some((file, is_root, 1))
                });
            let Some((mut file, mut is_root, skipped)) = start else {
                // Another crate, re-exported whole or in part.
                let shown = match &name {
                    Some(name) if segments.len() == 1 => format!("{path}::{name} = {first}"),
                    Some(name) => format!("{path}::{name}"),
                    None => format!("{path}::* = {}::*", segments.join("::")),
                };
                self.add(&shown, features);
                continue;
            };
            // Down the path's modules, as far as they are modules.
            let mut rest = &segments[skipped..];
            while let Some((segment, after)) = rest.split_first() {
                let children = if is_root {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                } else {
                    file.with_extension("")
                };
                let (child, child_is_root) = module_file(&children, segment);
                if !child.exists() {
                    break;
                }
                (file, is_root) = (child, child_is_root);
                rest = after;
            }
            match (&name, rest.is_empty()) {
                // A glob: everything public in the module reached.
                (None, true) => self.module(&file, is_root, path, features)?,
                // A module, under its name here.
                (Some(name), true) => {
                    self.add(&format!("{path}::{name}"), features);
                    self.module(&file, is_root, &format!("{path}::{name}"), features)?;
                }
                // A crate's exported macro, named at its root.
                (Some(name), false)
                    if segments.len() == 2
                        && LOCAL_CRATES.iter().any(|(krate, _)| krate == first)
                        && self.is_macro(&file, &segments[1])? =>
                {
                    self.add(&format!("{path}::{name}!"), features)
                }
                (Some(name), false) => self.add(&format!("{path}::{name}"), features),
                (None, false) => {
                    self.add(&format!("{path}::* = {}::*", segments.join("::")), features)
                }
            }
        }
        Ok(())
    }

    /// Whether the crate whose root file is `root` exports a macro `name`.
    fn is_macro(&mut self, root: &Path, name: &str) -> Result<bool> {
        if !self.macros.contains_key(root) {
            let macros = exported_macros(root)?;
            self.macros.insert(root.to_path_buf(), macros);
        }
        Ok(self
            .macros
            .get(root)
            .is_some_and(|macros| macros.contains(name)))
    }

    fn add(&mut self, path: &str, features: &BTreeSet<String>) {
        let line = if features.is_empty() {
            path.to_owned()
        } else {
            let features: Vec<&str> = features.iter().map(String::as_str).collect();
            format!("{path} [{}]", features.join(", "))
        };
        self.lines.insert(line);
    }
}

/// The names of the macros exported anywhere in the crate whose root file
/// is `root`.
fn exported_macros(root: &Path) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut folders = vec![root.parent().map(Path::to_path_buf).unwrap_or_default()];
    while let Some(folder) = folders.pop() {
        let entries = std::fs::read_dir(&folder)
            .with_context(|| format!("could not read {}", folder.display()))?;
        for entry in entries {
            let path = entry
                .with_context(|| format!("could not read {}", folder.display()))?
                .path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("could not read {}", path.display()))?;
                names.extend(
                    items(&text)
                        .into_iter()
                        .filter(|item| item.kind == "macro")
                        .map(|item| leading_name(&item.rest)),
                );
            }
        }
    }
    Ok(names)
}

/// The file of module `name` whose parent's children are in `children`,
/// and whether it is a `mod.rs`.
fn module_file(children: &Path, name: &str) -> (PathBuf, bool) {
    let file = children.join(format!("{name}.rs"));
    if file.exists() {
        (file, false)
    } else {
        (children.join(name).join("mod.rs"), true)
    }
}

/// The identifier `text` starts with.
fn leading_name(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The public items at the top of a module's `text`, and the exported
/// macros anywhere in it.
fn items(text: &str) -> Vec<Item> {
    let original: Vec<char> = text.chars().collect();
    let code = code_only(text);
    let mut found = Vec::new();
    let mut depth = 0usize;
    let mut index = 0;
    let word_at = |at: usize, word: &str| {
        let before = at == 0 || !(code[at - 1].is_alphanumeric() || code[at - 1] == '_');
        let matches = code[at..].iter().take(word.len()).copied().eq(word.chars());
        let after = code
            .get(at + word.len())
            .is_none_or(|c| !(c.is_alphanumeric() || *c == '_'));
        before && matches && after
    };
    while index < code.len() {
        match code[index] {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if word_at(index, "macro_rules") {
            let attributes = attributes_before(&code, &original, index);
            if attributes
                .iter()
                .any(|attribute| attribute.contains("macro_export"))
            {
                let rest: String = code[index + "macro_rules".len()..]
                    .iter()
                    .skip_while(|c| c.is_whitespace() || **c == '!')
                    .take(100)
                    .collect();
                found.push(Item {
                    kind: "macro".to_owned(),
                    rest,
                    features: features_of(&attributes),
                    body: None,
                });
            }
        }
        if depth == 0 && word_at(index, "pub") && code.get(index + 3) != Some(&'(') {
            let attributes = attributes_before(&code, &original, index);
            let hidden = attributes.iter().any(|attribute| {
                let attribute: String = attribute.split_whitespace().collect();
                attribute.contains("doc(hidden)")
                    || attribute.starts_with("cfg(test")
                    || attribute.starts_with("cfg(doctest")
            });
            let mut after = index + 3;
            // Past the qualifiers to the kind of item.
            let kind = loop {
                while after < code.len() && code[after].is_whitespace() {
                    after += 1;
                }
                let word: String = code[after..]
                    .iter()
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .collect();
                after += word.len();
                match word.as_str() {
                    "unsafe" | "async" | "extern" | "auto" => {}
                    "const" if word_at_any(&code, after, &["fn", "unsafe", "async"]) => {}
                    "" if code.get(after) == Some(&'"') => {
                        // The ABI of an `extern "C" fn`.
                        after += 1;
                        while after < code.len() && code[after] != '"' {
                            after += 1;
                        }
                        after += 1;
                    }
                    _ => break word,
                }
            };
            // A use tree runs to its `;`, any other item's head to its body.
            let is_use = kind == "use";
            let end = code[after..]
                .iter()
                .position(|c| *c == ';' || (*c == '{' && !is_use))
                .map_or(code.len(), |offset| after + offset);
            if !hidden && !kind.is_empty() {
                // An inline module's text, to its closing brace.
                let body = (kind == "mod" && code.get(end) == Some(&'{')).then(|| {
                    let mut depth = 0usize;
                    let close = code[end..]
                        .iter()
                        .position(|c| {
                            match c {
                                '{' => depth += 1,
                                '}' => depth -= 1,
                                _ => {}
                            }
                            depth == 0
                        })
                        .map_or(code.len(), |offset| end + offset);
                    original[end + 1..close].iter().collect()
                });
                found.push(Item {
                    kind,
                    rest: code[after..end].iter().collect(),
                    features: features_of(&attributes),
                    body,
                });
            }
        }
        index += 1;
    }
    found
}

/// Whether the code at `at`, past white space, starts with one of `words`.
fn word_at_any(code: &[char], at: usize, words: &[&str]) -> bool {
    let start = code[at..]
        .iter()
        .position(|c| !c.is_whitespace())
        .map_or(code.len(), |offset| at + offset);
    let word: String = code[start..]
        .iter()
        .take_while(|c| c.is_alphanumeric() || **c == '_')
        .collect();
    words.contains(&word.as_str())
}

/// The attributes (`#[...]`, their text inside the brackets) just before
/// the item at `at`, read from `original` where `code` finds them.
fn attributes_before(code: &[char], original: &[char], at: usize) -> Vec<String> {
    let mut attributes = Vec::new();
    let mut end = at;
    loop {
        while end > 0 && code[end - 1].is_whitespace() {
            end -= 1;
        }
        if end == 0 || code[end - 1] != ']' {
            break;
        }
        // Back to the `#[` that opens it.
        let mut depth = 0usize;
        let mut start = end;
        while start > 0 {
            start -= 1;
            match code[start] {
                ']' => depth += 1,
                '[' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        if start == 0 || code[start - 1] != '#' {
            break;
        }
        attributes.push(original[start + 1..end - 1].iter().collect());
        end = start - 1;
    }
    attributes
}

/// The features `cfg` attributes name (`feature = "store"`).
fn features_of(attributes: &[String]) -> BTreeSet<String> {
    let mut features = BTreeSet::new();
    for attribute in attributes {
        let attribute: String = attribute.split_whitespace().collect();
        if !attribute.starts_with("cfg(") {
            continue;
        }
        for part in attribute.split("feature=\"").skip(1) {
            if let Some((feature, _)) = part.split_once('"') {
                features.insert(feature.to_owned());
            }
        }
    }
    features
}

/// The leaves of a use tree (`a::{b, c::d as e, f::*}`): each one's path
/// and the name it takes (`None` for a glob).
fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut leaves = Vec::new();
    leaves_of(tree.trim().trim_start_matches("::"), &[], &mut leaves);
    leaves
}

fn leaves_of(tree: &str, prefix: &[String], leaves: &mut Vec<(Vec<String>, Option<String>)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut base = prefix.to_vec();
        base.extend(
            tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|segment| !segment.is_empty())
                .map(str::to_owned),
        );
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut depth = 0usize;
        let mut start = 0;
        for (at, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    leaves_of(&inner[start..at], &base, leaves);
                    start = at + 1;
                }
                _ => {}
            }
        }
        leaves_of(&inner[start..], &base, leaves);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path.trim(), Some(alias.trim().to_owned())),
        None => (tree, None),
    };
    let mut segments = prefix.to_vec();
    segments.extend(path.split("::").map(str::trim).map(str::to_owned));
    if segments.last().is_some_and(|last| last == "*") {
        segments.pop();
        leaves.push((segments, None));
        return;
    }
    if segments.last().is_some_and(|last| last == "self") {
        segments.pop();
    }
    let name = alias.or_else(|| segments.last().cloned());
    leaves.push((segments, name));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_tree_gives_each_leaf_and_its_name() {
        let leaves = use_leaves("kiln_engine::{mode, store::{self, Lookup as Found}, fake::*}");
        let shown: Vec<String> = leaves
            .iter()
            .map(|(path, name)| format!("{} {name:?}", path.join("::")))
            .collect();
        assert_eq!(
            shown,
            [
                "kiln_engine::mode Some(\"mode\")",
                "kiln_engine::store Some(\"store\")",
                "kiln_engine::store::Lookup Some(\"Found\")",
                "kiln_engine::fake None",
            ]
        );
    }

    #[test]
    fn items_are_the_public_ones_at_the_top_with_their_features() {
        let text = "pub struct A;\npub(crate) struct B;\n#[cfg(feature = \"store\")]\n\
                    #[doc(inline)]\npub use x as y;\nimpl A { pub fn c() {} }\n\
                    #[doc(hidden)]\npub fn d() {}\n#[cfg(test)]\npub mod e;\n\
                    pub const fn f() {}\npub const G: u8 = 1;\n\
                    #[macro_export]\nmacro_rules! h { () => {} }\n";
        let shown: Vec<String> = items(text)
            .iter()
            .map(|item| {
                format!(
                    "{} {} {:?}",
                    item.kind,
                    leading_name(&item.rest),
                    item.features
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "struct A {}",
                "use x {\"store\"}",
                "fn f {}",
                "const G {}",
                "macro h {}"
            ]
        );
    }

    #[test]
    fn the_kept_list_is_the_facade_s_surface() {
        check(&crate::setup::workspace_root()).expect("the facade's surface is the kept one");
    }
}
