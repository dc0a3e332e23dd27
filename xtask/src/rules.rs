//! The rule ids of docs/BEHAVIOUR.md against the code and the docs, checked
//! by `cargo xtask lint`:
//!
//! - every id the code or the docs use (`// P4`, `(L5c)`, a test named
//!   `l7_...`) is a rule docs/BEHAVIOUR.md states;
//! - every rule it states is named by a test (a file under a `tests/`
//!   folder, a bench, the conformance suite, or a `#[cfg(test)]` module),
//!   unless the rule is marked *planned*, as docs/BEHAVIOUR.md marks a
//!   rule promised by an open issue and not yet held.
//!
//! Everything comes from the files: the rule families are the letters
//! docs/BEHAVIOUR.md defines ids with (`- **P13**`), so a new rule or a new
//! family needs no change here. A rule added without its test fails the
//! lint until its test lands or it is marked *planned*: a rule no test can
//! break is what this check is for.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The folders of code whose ids must resolve and whose tests name rules.
const CODE: &[&str] = &[
    "crates", "backends", "tests", "benches", "xtask", "examples",
];
/// This file, whose examples are ids of no rule: left out of the check.
const THIS_FILE: &str = "xtask/src/rules.rs";
/// The documents whose ids must resolve, besides every `.md` under `docs/`.
const DOCUMENTS: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "BENCHMARKS.md",
    "CHANGELOG.md",
];

/// One rule docs/BEHAVIOUR.md states.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    id: String,
    is_planned: bool,
}

/// The rules stated in `behaviour` (the text of docs/BEHAVIOUR.md): each
/// list item that opens with a bold id, `- **L5** ...`, with its text up
/// to the next item or heading.
fn stated_rules(behaviour: &str) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut in_rule = false;
    for line in behaviour.lines() {
        if let Some(id) = line
            .strip_prefix("- **")
            .and_then(|rest| rest.split_once("**"))
            .map(|(id, _)| id)
            .filter(|id| is_rule_id(id))
        {
            rules.push(Rule {
                id: id.to_owned(),
                is_planned: line.contains("*planned*"),
            });
            in_rule = true;
        } else if line.starts_with("- ") || line.starts_with('#') || line.trim().is_empty() {
            in_rule = false;
        } else if in_rule
            && line.contains("*planned*")
            && let Some(rule) = rules.last_mut()
        {
            rule.is_planned = true;
        }
    }
    rules
}

/// `P13`: one capital letter and one or two digits.
fn is_rule_id(text: &str) -> bool {
    let mut characters = text.chars();
    let Some(letter) = characters.next() else {
        return false;
    };
    let digits = characters.as_str();
    letter.is_ascii_uppercase()
        && (1..=2).contains(&digits.len())
        && digits.chars().all(|digit| digit.is_ascii_digit())
}

fn is_word(character: char) -> bool {
    character.is_ascii_alphanumeric() || character == '_'
}

/// The ids of `families` in `text`: a capital family letter, one or two
/// digits and an optional part letter (`L5c`), standing alone as a word;
/// and the rule a test's name opens with (`fn l7_...`, `fn l5c_...`).
fn ids_in(text: &str, families: &BTreeSet<char>) -> Vec<String> {
    let characters: Vec<char> = text.chars().collect();
    let mut found = Vec::new();
    let mut index = 0;
    while index < characters.len() {
        let starts_a_word = index == 0 || !is_word(characters[index - 1]);
        if !starts_a_word {
            index += 1;
            continue;
        }
        let letter = characters[index];
        let is_test_name = index >= 3
            && characters[index - 3..index] == ['f', 'n', ' ']
            && families.contains(&letter.to_ascii_uppercase())
            && letter.is_ascii_lowercase();
        if !(families.contains(&letter) || is_test_name) {
            index += 1;
            continue;
        }
        let digits = characters[index + 1..]
            .iter()
            .take_while(|character| character.is_ascii_digit())
            .count();
        let mut end = index + 1 + digits;
        if characters
            .get(end)
            .is_some_and(|part| ('a'..='e').contains(part))
        {
            end += 1;
        }
        let closes = match characters.get(end) {
            None => !is_test_name,
            Some(&next) if is_test_name => next == '_',
            Some(&next) => !is_word(next),
        };
        if (1..=2).contains(&digits) && closes {
            let number: String = characters[index + 1..index + 1 + digits].iter().collect();
            found.push(format!("{}{number}", letter.to_ascii_uppercase()));
        }
        index = end.max(index + 1);
    }
    found
}

/// The part of a source file that is test code: all of it for a file of a
/// `tests/` folder, a bench or the conformance suite; what follows
/// `#[cfg(test)]` otherwise.
fn test_part<'a>(path: &Path, text: &'a str) -> &'a str {
    let shown = path.to_string_lossy();
    if shown.contains("/tests/")
        || shown.starts_with("tests/")
        || path.file_name().is_some_and(|name| name == "tests.rs")
        || shown.starts_with("benches/")
        || shown.contains("/conformance/")
    {
        return text;
    }
    text.find("#[cfg(test)]").map_or("", |start| &text[start..])
}

fn files_under(folder: &Path, extension: &str, found: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(folder).with_context(|| format!("listing {}", folder.display()))?;
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        if entry.file_type()?.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                files_under(&path, extension, found)?;
            }
        } else if path.extension().is_some_and(|found| found == extension) {
            found.push(path);
        }
    }
    Ok(())
}

/// What the check found.
#[derive(Debug, Default, PartialEq, Eq)]
struct Findings {
    /// Ids used that docs/BEHAVIOUR.md does not state, with where.
    unresolved: BTreeMap<String, BTreeSet<String>>,
    /// Rules stated and not planned that no test names.
    untested: Vec<String>,
    /// How many ids were read in all.
    uses: usize,
}

/// Checks `sources` ((shown path, text, whether it is code)) against
/// `behaviour`.
fn check_texts(behaviour: &str, sources: &[(PathBuf, String, bool)]) -> (Vec<Rule>, Findings) {
    let rules = stated_rules(behaviour);
    let stated: BTreeSet<&str> = rules.iter().map(|rule| rule.id.as_str()).collect();
    let families: BTreeSet<char> = rules
        .iter()
        .filter_map(|rule| rule.id.chars().next())
        .collect();
    let mut findings = Findings::default();
    let mut named = BTreeSet::new();
    for (path, text, is_code) in sources {
        let shown = path.to_string_lossy().into_owned();
        for id in ids_in(text, &families) {
            findings.uses += 1;
            if !stated.contains(id.as_str()) {
                findings
                    .unresolved
                    .entry(id)
                    .or_default()
                    .insert(shown.clone());
            }
        }
        if *is_code {
            named.extend(ids_in(test_part(path, text), &families));
        }
    }
    findings.untested = rules
        .iter()
        .filter(|rule| !rule.is_planned && !named.contains(&rule.id))
        .map(|rule| rule.id.clone())
        .collect();
    (rules, findings)
}

/// Runs the check over the workspace at `root`.
pub fn check(root: &Path) -> Result<()> {
    let behaviour_path = root.join("docs/BEHAVIOUR.md");
    let behaviour = std::fs::read_to_string(&behaviour_path)
        .with_context(|| format!("reading {}", behaviour_path.display()))?;
    let mut code = Vec::new();
    for folder in CODE {
        files_under(&root.join(folder), "rs", &mut code)?;
    }
    let mut documents = Vec::new();
    files_under(&root.join("docs"), "md", &mut documents)?;
    documents.extend(
        DOCUMENTS
            .iter()
            .map(|name| root.join(name))
            .filter(|path| path.is_file()),
    );
    let mut sources = Vec::new();
    for (paths, is_code) in [(code, true), (documents, false)] {
        for path in paths {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let shown = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            if shown != Path::new(THIS_FILE) {
                sources.push((shown, text, is_code));
            }
        }
    }
    let (rules, findings) = check_texts(&behaviour, &sources);
    let mut problems = Vec::new();
    for (id, places) in &findings.unresolved {
        let places: Vec<&str> = places.iter().map(String::as_str).collect();
        problems.push(format!(
            "{id} is not a rule of docs/BEHAVIOUR.md (used in {})",
            places.join(", ")
        ));
    }
    for id in &findings.untested {
        problems.push(format!(
            "{id} is stated in docs/BEHAVIOUR.md but no test names it: name it in a test \
             (`// {id}` or `fn {}_...`), or mark the rule *planned*",
            id.to_ascii_lowercase()
        ));
    }
    if !problems.is_empty() {
        bail!("the rule ids do not match:\n{}", problems.join("\n"));
    }
    let planned = rules.iter().filter(|rule| rule.is_planned).count();
    println!(
        "rules: {} uses of {} rules resolve in docs/BEHAVIOUR.md; every rule is named by a \
         test ({planned} planned)",
        findings.uses,
        rules.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEHAVIOUR: &str = "\
# What kiln does

- **L1** Queuing compiles nothing.
- **L5** A batch (a) asks the store; it goes
  on over lines.
- **P13** *planned* Packs of entries.
- **T1** A rule of a new family,
  still *planned*.

Rules marked *planned* have no test yet.
";

    fn families() -> BTreeSet<char> {
        ['L', 'P', 'T'].into_iter().collect()
    }

    #[test]
    fn rules_are_the_bold_ids_opening_an_item_and_planned_ones_say_so() {
        let rules = stated_rules(BEHAVIOUR);
        let ids: Vec<(&str, bool)> = rules
            .iter()
            .map(|rule| (rule.id.as_str(), rule.is_planned))
            .collect();
        assert_eq!(
            ids,
            [("L1", false), ("L5", false), ("P13", true), ("T1", true)]
        );
    }

    #[test]
    fn ids_are_whole_words_of_a_family_and_test_names_count() {
        let text = "// L5c, P13\nfn l7_a_failure() {}\nfn p1_keys() {}\n\
                    L2cache H200 B1 0xL5 D3D12 xL1 L123 fn lx_no() T1";
        assert_eq!(
            ids_in(text, &families()),
            ["L5", "P13", "L7", "P1", "T1"],
            "B is no family here, and L123, L2cache, 0xL5 are no ids"
        );
    }

    #[test]
    fn an_unstated_id_and_an_untested_rule_are_found() {
        let sources = vec![
            (
                PathBuf::from("crates/a/src/lib.rs"),
                "// L1 and L9 here\n#[cfg(test)]\nmod tests { fn l5_holds() {} }".to_owned(),
                true,
            ),
            (PathBuf::from("docs/X.md"), "see P14".to_owned(), false),
        ];
        let (_, findings) = check_texts(BEHAVIOUR, &sources);
        let unresolved: Vec<&str> = findings.unresolved.keys().map(String::as_str).collect();
        assert_eq!(unresolved, ["L9", "P14"]);
        assert_eq!(
            findings.untested,
            ["L1"],
            "L1 is named outside the tests only; P13 and T1 are planned"
        );
    }

    #[test]
    fn this_workspace_s_rules_match_its_code_and_docs() {
        let root = crate::setup::workspace_root();
        check(&root).expect("every id resolves and every rule is tested");
    }
}
