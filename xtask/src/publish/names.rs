//! Whether the registry holds a package's name for another owner.
//!
//! `cargo info` and `cargo search` hide a crate whose versions are all
//! yanked, yet its owner still holds the name and `cargo publish` of
//! another crate by that name is refused. So the check asks the registry's
//! sparse index for the exact file of each name, and of each spelling the
//! registry takes for the same name (`-` and `_` are one), where a yanked
//! version is a version like any other.
//!
//! The answers are kept in `xtask/registry-names.json`, committed, so the
//! offline check (CI, `cargo xtask lint`) needs no network: a package name
//! the file does not answer is a problem until `cargo xtask publish-check
//! --registry` looks it up and writes it down. Names kiln's owners publish
//! themselves are listed under `ours`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// The registry's sparse index.
const INDEX: &str = "https://index.crates.io";

/// Another index (a folder or an address) for the lookups, for a test or a
/// mirror.
const INDEX_VARIABLE: &str = "KILN_PUBLISH_INDEX";

/// The committed answers, relative to the workspace's root.
pub const CACHE: &str = "xtask/registry-names.json";

/// What the index says of one name: nothing, or the versions someone
/// published under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub versions: usize,
    pub yanked: usize,
    /// When its first version was published (`2019-02-11`), when said.
    pub since: Option<String>,
}

/// The index's file of `name`: `1/a`, `2/ab`, `3/a/abc`, `ab/cd/abcd...`.
pub fn index_path(name: &str) -> String {
    let name = name.to_ascii_lowercase();
    match name.len() {
        1 => format!("1/{name}"),
        2 => format!("2/{name}"),
        3 => format!("3/{}/{name}", &name[..1]),
        _ => format!("{}/{}/{name}", &name[..2], &name[2..4]),
    }
}

/// Every spelling the registry takes for the same name as `name`: each
/// `-` or `_` as either, lower case.
pub fn spellings(name: &str) -> Vec<String> {
    let mut spellings = vec![String::new()];
    for character in name.to_ascii_lowercase().chars() {
        if character == '-' || character == '_' {
            spellings = spellings
                .into_iter()
                .flat_map(|start| [format!("{start}-"), format!("{start}_")])
                .collect();
        } else {
            for spelling in &mut spellings {
                spelling.push(character);
            }
        }
    }
    spellings
}

/// Reads an index file's lines (one JSON object per version).
fn parse_entry(text: &str) -> Held {
    let versions: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    Held {
        versions: versions.len(),
        yanked: versions
            .iter()
            .filter(|version| version["yanked"] == true)
            .count(),
        since: versions
            .iter()
            .filter_map(|version| version["pubtime"].as_str())
            .min()
            .map(|time| time.chars().take(10).collect()),
    }
}

/// The index to ask: `KILN_PUBLISH_INDEX` or the registry's.
pub fn index() -> String {
    std::env::var(INDEX_VARIABLE).unwrap_or_else(|_| INDEX.to_owned())
}

/// Asks `index` (an address, or a folder laid out as the index is) for
/// `name`'s file: `Ok(None)` when no one holds it, an error when the
/// index cannot be reached.
pub fn look_up(index: &str, name: &str) -> Result<Option<Held>> {
    let path = index_path(name);
    if !index.starts_with("http://") && !index.starts_with("https://") {
        let file = Path::new(index.trim_start_matches("file://")).join(&path);
        return match std::fs::read_to_string(&file) {
            Ok(text) => Ok(Some(parse_entry(&text))),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).with_context(|| format!("reading {}", file.display())),
        };
    }
    let address = format!("{}/{path}", index.trim_end_matches('/'));
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--location"])
        .args(["--connect-timeout", "10", "--max-time", "30"])
        .args(["--write-out", "\n%{http_code}", &address])
        .output()
        .context("running curl to ask the registry's index")?;
    if !output.status.success() {
        bail!(
            "curl could not reach {address}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let body = String::from_utf8_lossy(&output.stdout);
    let (text, status) = body.rsplit_once('\n').unwrap_or(("", body.as_ref()));
    match status.trim() {
        "200" => Ok(Some(parse_entry(text))),
        "404" | "410" => Ok(None),
        other => bail!("the index answered {other} for {address}"),
    }
}

/// The committed answers: each name looked up, and the names that are ours.
#[derive(Debug, Default)]
pub struct Answers {
    pub names: BTreeMap<String, Option<Held>>,
    pub ours: BTreeSet<String>,
    /// The day of the last lookup (`2026-12-05`), when said.
    pub checked: Option<String>,
}

impl Answers {
    /// Reads `file`; a missing file answers nothing.
    pub fn read(file: &Path) -> Result<Self> {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self::default());
            }
            Err(error) => return Err(error).with_context(|| format!("reading {CACHE}")),
        };
        let value: Value =
            serde_json::from_str(&text).with_context(|| format!("reading {CACHE}"))?;
        let names = value["names"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, held)| {
                let held = held.as_object().map(|held| Held {
                    versions: held["versions"].as_u64().unwrap_or(1) as usize,
                    yanked: held["yanked"].as_u64().unwrap_or(0) as usize,
                    since: held.get("since").and_then(Value::as_str).map(str::to_owned),
                });
                (name.clone(), held)
            })
            .collect();
        let ours = value["ours"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let checked = value["checked"].as_str().map(str::to_owned);
        Ok(Self {
            names,
            ours,
            checked,
        })
    }

    /// Writes the answers to `file`, one name a line.
    pub fn write(&self, file: &Path) -> Result<()> {
        let mut names = Map::new();
        for (name, held) in &self.names {
            let held = match held {
                None => Value::Null,
                Some(held) => json!({
                    "versions": held.versions,
                    "yanked": held.yanked,
                    "since": held.since,
                }),
            };
            names.insert(name.clone(), held);
        }
        let value = json!({
            "about": "What the registry's sparse index said of each name (null: no one holds \
                      it; yanked versions still hold a name). Written by `cargo xtask \
                      publish-check --registry`; read by the offline check. `ours` lists the \
                      names kiln's owners published.",
            "checked": self.checked,
            "ours": self.ours,
            "names": names,
        });
        let text = serde_json::to_string_pretty(&value)? + "\n";
        std::fs::write(file, text).with_context(|| format!("writing {CACHE}"))
    }
}

/// What stops `packages` from being published under their names: a name
/// (in any spelling) held by another owner, or one the answers lack.
pub fn problems<'a>(
    packages: impl IntoIterator<Item = &'a String>,
    answers: &Answers,
) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages {
        for spelling in spellings(package) {
            match answers.names.get(&spelling) {
                None => problems.push(format!(
                    "{package}: whether the registry holds `{spelling}` is not known: run \
                     `cargo xtask publish-check --registry` to ask its index and write it down"
                )),
                Some(Some(held)) if !answers.ours.contains(&spelling) => {
                    let yanked = match held.yanked {
                        0 => String::new(),
                        yanked if yanked == held.versions => ", all yanked".to_owned(),
                        yanked => format!(", {yanked} yanked"),
                    };
                    let since = held
                        .since
                        .as_deref()
                        .map(|since| format!(" since {since}"))
                        .unwrap_or_default();
                    problems.push(format!(
                        "{package}: the registry holds `{spelling}` for another owner ({} \
                         version(s){yanked}{since}): `cargo publish` would be refused; choose \
                         a name no one holds",
                        held.versions
                    ));
                }
                Some(_) => {}
            }
        }
    }
    problems
}

/// Asks `index` for every spelling of every package and writes what it
/// said into the answers at `file`: `Ok(false)` when the index could not
/// be reached (the answers are kept as they were).
pub fn refresh<'a>(
    packages: impl IntoIterator<Item = &'a String>,
    index: &str,
    file: &Path,
    today: Option<String>,
) -> Result<bool> {
    let mut answers = Answers::read(file)?;
    let mut found = Vec::new();
    for package in packages {
        for spelling in spellings(package) {
            match look_up(index, &spelling) {
                Ok(held) => found.push((spelling, held)),
                Err(error) => {
                    println!("publish-check: names not asked of the index: {error:#}");
                    return Ok(false);
                }
            }
        }
    }
    let changed = found
        .iter()
        .any(|(name, held)| answers.names.get(name) != Some(held));
    answers.names.extend(found);
    if changed {
        answers.checked = today.or(answers.checked);
        answers.write(file)?;
        println!("publish-check: the index's answers written to {CACHE}");
    }
    Ok(true)
}

/// The committed answers' file under `root`.
pub fn cache_file(root: &Path) -> PathBuf {
    root.join(CACHE)
}

/// Today's date (`2026-12-05`) by `date`, when it answers.
pub fn today() -> Option<String> {
    let output = Command::new("date").args(["-u", "+%F"]).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned()).filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder laid out as the sparse index, in the system's temporary folder.
    fn fake_index(test: &str, entries: &[(&str, &str)]) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("xtask-index-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        for (name, text) in entries {
            let file = folder.join(index_path(name));
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("index folder");
            std::fs::write(file, text).expect("index entry");
        }
        folder
    }

    const YANKED: &str = r#"{"name":"kiln","vers":"0.1.0","deps":[],"cksum":"00","features":{},"yanked":true,"pubtime":"2019-02-11T21:13:04Z"}
{"name":"kiln","vers":"0.1.1","deps":[],"cksum":"01","features":{},"yanked":true,"pubtime":"2019-03-01T10:00:00Z"}
"#;

    #[test]
    fn index_paths_follow_the_sparse_layout_and_both_separators_are_one_name() {
        assert_eq!(index_path("a"), "1/a");
        assert_eq!(index_path("ab"), "2/ab");
        assert_eq!(index_path("abc"), "3/a/abc");
        assert_eq!(index_path("Kiln"), "ki/ln/kiln");
        assert_eq!(index_path("kiln-engine"), "ki/ln/kiln-engine");
        assert_eq!(
            spellings("Kiln-A_b"),
            ["kiln-a-b", "kiln-a_b", "kiln_a-b", "kiln_a_b"]
        );
        assert_eq!(spellings("kiln"), ["kiln"]);
    }

    #[test]
    fn a_name_held_only_by_yanked_versions_of_another_owner_fails_the_check() {
        let index = fake_index("held", &[("kiln", YANKED)]);
        let file = index.join("answers.json");
        let packages = vec!["kiln".to_owned(), "kiln-engine".to_owned()];
        let index_text = index.to_string_lossy().into_owned();
        assert!(refresh(&packages, &index_text, &file, Some("2026-12-05".into())).expect("asked"));
        let answers = Answers::read(&file).expect("written");
        assert_eq!(
            answers.names["kiln"],
            Some(Held {
                versions: 2,
                yanked: 2,
                since: Some("2019-02-11".into())
            })
        );
        assert_eq!(answers.names["kiln_engine"], None);
        assert_eq!(
            problems(&packages, &answers),
            [
                "kiln: the registry holds `kiln` for another owner (2 version(s), all yanked since \
              2019-02-11): `cargo publish` would be refused; choose a name no one holds"
            ]
        );
        // The same name, once it is ours, is no problem; a name never asked is.
        let mut ours = answers;
        ours.ours.insert("kiln".into());
        assert!(problems(&packages, &ours).is_empty());
        let unknown = vec!["kiln-gpu".to_owned()];
        assert_eq!(problems(&unknown, &ours).len(), 2, "kiln-gpu and kiln_gpu");
        let _ = std::fs::remove_dir_all(index);
    }

    #[test]
    fn an_index_that_cannot_be_reached_keeps_the_answers() {
        let index = fake_index("unreachable", &[]);
        let file = index.join("answers.json");
        let packages = vec!["kiln".to_owned()];
        assert!(
            !refresh(&packages, "http://127.0.0.1:9", &file, None).expect("no failure"),
            "a closed port is no answer"
        );
        assert!(Answers::read(&file).expect("nothing").names.is_empty());
        let _ = std::fs::remove_dir_all(index);
    }

    #[test]
    fn the_committed_answers_say_the_registry_holds_kiln() {
        let answers = Answers::read(&cache_file(&crate::setup::workspace_root())).expect("read");
        assert!(
            matches!(&answers.names.get("kiln"), Some(Some(held)) if held.yanked == held.versions),
            "the index holds five yanked versions of `kiln` from 2019"
        );
    }
}
