//! `cargo xtask publish-check`: what can be known about publishing every
//! publishable package without publishing, and without the registry.
//!
//! Offline, it checks what a registry would take or refuse for reasons of
//! the workspace's own: each package's manifest (a licence, a description,
//! a README, no placeholder address), that each package's file list holds
//! both licences and its README, that no normal dependency of a published
//! package turns on a feature that exists for tests, and that `cargo
//! package` makes every `.crate`, the packages resolved against each other
//! in dependency order (cargo's local overlay of the packages it packages,
//! so unpublished siblings are no failure). Whether the registry holds a
//! package's name for another owner comes from the answers its index gave,
//! committed in `xtask/registry-names.json` (`names`): `--registry` asks
//! the index again and writes them down. It cannot build the packages as
//! the registry would: `--registry` adds `cargo publish --dry-run` of every
//! package at once (cargo resolves each against its unpublished siblings),
//! which builds each one (minutes) and needs the registry: a run that cannot
//! reach it is reported as not checked rather than as a failure.

mod names;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::command;

/// Features that exist for tests and benches only: no published package's
/// normal dependency may turn them on, or a user's build would carry them.
const TEST_ONLY_FEATURES: &[&str] = &["testing", "bench"];

/// The licence files every package carries.
const LICENCES: &[&str] = &["LICENSE-MIT", "LICENSE-APACHE"];

/// A workspace package the registry would receive.
#[derive(Debug)]
struct Package {
    name: String,
    /// Its normal and build dependencies on other packages of the workspace.
    siblings: BTreeSet<String>,
    manifest: Value,
}

/// Runs the offline checks, and with `registry` the dry runs too.
pub fn check(registry: bool) -> Result<()> {
    let packages = publishable()?;
    let order = dependency_order(&packages)?;
    let file = names::cache_file(&crate::setup::workspace_root());
    if registry {
        names::refresh(&order, &names::index(), &file, names::today())?;
    }
    let mut problems = names::problems(&order, &names::Answers::read(&file)?);
    for name in &order {
        let package = &packages[name];
        problems.extend(manifest_problems(package, &packages));
        problems.extend(file_problems(package)?);
    }
    if !problems.is_empty() {
        bail!(
            "publish-check: {} problem(s):\n{}",
            problems.len(),
            problems.join("\n")
        );
    }
    let mut arguments = vec!["package", "--no-verify", "--allow-dirty", "--offline"];
    for name in &order {
        arguments.extend(["--package", name.as_str()]);
    }
    command::cargo(&arguments).run("cargo package of every publishable package")?;
    println!(
        "publish-check: {} packages, in this order: {}; manifests, licences, READMEs and \
         features are as a registry wants them, and no one else holds their names",
        order.len(),
        order.join(", ")
    );
    if registry {
        dry_runs(&order)?;
    }
    Ok(())
}

/// The workspace's packages whose `publish` is not `false`.
fn publishable() -> Result<BTreeMap<String, Package>> {
    let metadata = command::cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ])
    .output("cargo metadata")?;
    let metadata: Value = serde_json::from_slice(&metadata).context("reading cargo metadata")?;
    let members = metadata["packages"]
        .as_array()
        .context("cargo metadata lists no packages")?;
    let names: BTreeSet<&str> = members
        .iter()
        .filter_map(|package| package["name"].as_str())
        .collect();
    let mut packages = BTreeMap::new();
    for manifest in members {
        // `publish = false` reads as an empty list of registries.
        if manifest["publish"]
            .as_array()
            .is_some_and(|registries| registries.is_empty())
        {
            continue;
        }
        let name = manifest["name"].as_str().unwrap_or_default().to_owned();
        let siblings = normal_dependencies(manifest)
            .filter_map(|dependency| dependency["name"].as_str())
            .filter(|dependency| names.contains(dependency))
            .map(str::to_owned)
            .collect();
        packages.insert(
            name.clone(),
            Package {
                name,
                siblings,
                manifest: manifest.clone(),
            },
        );
    }
    Ok(packages)
}

/// The dependencies a user's build of `manifest` compiles: normal and
/// build, not dev.
fn normal_dependencies(manifest: &Value) -> impl Iterator<Item = &Value> {
    manifest["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|dependency| dependency["kind"].is_null() || dependency["kind"] == "build")
}

/// The packages, each after every sibling it depends on.
fn dependency_order(packages: &BTreeMap<String, Package>) -> Result<Vec<String>> {
    let mut order: Vec<String> = Vec::new();
    while order.len() < packages.len() {
        let ready: Vec<&String> = packages
            .values()
            .filter(|package| !order.contains(&package.name))
            .filter(|package| {
                package.siblings.iter().all(|sibling| {
                    order.contains(sibling) || !packages.contains_key(sibling.as_str())
                })
            })
            .map(|package| &package.name)
            .collect();
        if ready.is_empty() {
            bail!("the publishable packages depend on each other in a cycle");
        }
        order.extend(ready.into_iter().cloned());
    }
    Ok(order)
}

/// What the registry would refuse or warn of in `package`'s manifest, and
/// the siblings it depends on without a version or through a test-only
/// feature.
fn manifest_problems(package: &Package, packages: &BTreeMap<String, Package>) -> Vec<String> {
    let manifest = &package.manifest;
    let name = &package.name;
    let mut problems = Vec::new();
    for field in ["license", "description", "readme"] {
        if manifest[field].as_str().is_none_or(str::is_empty) {
            problems.push(format!("{name}: no `{field}`"));
        }
    }
    for field in ["repository", "homepage", "documentation"] {
        if let Some(address) = manifest[field].as_str()
            && (address.contains("example.") || address.contains(".invalid"))
        {
            problems.push(format!(
                "{name}: `{field}` is a placeholder ({address}): name a real one or none"
            ));
        }
    }
    for dependency in normal_dependencies(manifest) {
        let Some(sibling) = dependency["name"].as_str() else {
            continue;
        };
        if !packages.contains_key(sibling) {
            if dependency["path"].is_string() {
                problems.push(format!(
                    "{name}: depends on {sibling}, which is not published"
                ));
            }
            continue;
        }
        if dependency["req"].as_str().is_none_or(|req| req == "*") {
            problems.push(format!(
                "{name}: depends on {sibling} without a version: the registry refuses it"
            ));
        }
        for feature in dependency["features"].as_array().into_iter().flatten() {
            let feature = feature.as_str().unwrap_or_default();
            if TEST_ONLY_FEATURES.contains(&feature) {
                problems.push(format!(
                    "{name}: its dependency on {sibling} turns on `{feature}`, a feature for \
                     tests: move it to [dev-dependencies]"
                ));
            }
        }
    }
    problems.extend(feature_problems(package, packages));
    problems
}

/// The features of `package` a user turns on without asking for test code
/// that turn on a sibling's test-only feature (`default = ["kiln-engine/testing"]`).
/// A test feature may forward to a sibling's: a program's tests ask for it.
fn feature_problems(package: &Package, packages: &BTreeMap<String, Package>) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(features) = package.manifest["features"].as_object() else {
        return problems;
    };
    for (feature, enables) in features {
        if TEST_ONLY_FEATURES.contains(&feature.as_str()) {
            continue;
        }
        for enabled in enables.as_array().into_iter().flatten() {
            let enabled = enabled.as_str().unwrap_or_default();
            let own = !enabled.contains('/') && TEST_ONLY_FEATURES.contains(&enabled);
            let sibling = enabled.split_once('/').is_some_and(|(sibling, named)| {
                packages.contains_key(sibling.trim_end_matches('?'))
                    && TEST_ONLY_FEATURES.contains(&named)
            });
            if own || sibling {
                problems.push(format!(
                    "{}: its feature `{feature}` turns on `{enabled}`, a feature for tests",
                    package.name
                ));
            }
        }
    }
    problems
}

/// What `package`'s file list lacks: both licences and its README.
fn file_problems(package: &Package) -> Result<Vec<String>> {
    let name = &package.name;
    let listed = command::cargo(&[
        "package",
        "--list",
        "--no-verify",
        "--allow-dirty",
        "--offline",
        "--package",
        name,
    ])
    .output(&format!("cargo package --list of {name}"))?;
    let listed = String::from_utf8_lossy(&listed);
    let files: BTreeSet<&str> = listed.lines().map(str::trim).collect();
    let readme = package.manifest["readme"]
        .as_str()
        .and_then(|path| path.rsplit('/').next())
        .unwrap_or("README.md");
    Ok(LICENCES
        .iter()
        .copied()
        .chain(std::iter::once(readme))
        .filter(|file| !files.contains(file))
        .map(|file| format!("{name}: its package holds no {file}"))
        .collect())
}

/// `cargo publish --dry-run` of every package of `order` at once, so that
/// cargo resolves each against the others as it would publish them; a run
/// that cannot reach the registry is reported as not checked.
fn dry_runs(order: &[String]) -> Result<()> {
    let mut arguments = vec!["publish", "--dry-run", "--allow-dirty"];
    for name in order {
        arguments.extend(["--package", name.as_str()]);
    }
    let output = command::cargo(&arguments)
        .into_command()
        .output()
        .context("running cargo publish --dry-run")?;
    let said = String::from_utf8_lossy(&output.stderr);
    let taken: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("already exists"))
        .collect();
    for line in &taken {
        println!("publish-check: the registry holds this name for another crate: {line}");
    }
    if output.status.success() {
        println!("publish-check: cargo publish --dry-run passes for every package");
    } else if is_unreachable(&said) {
        println!(
            "publish-check: cargo publish --dry-run not checked: the registry cannot be reached"
        );
    } else {
        eprintln!("{said}");
        if !taken.is_empty() {
            bail!(
                "cargo publish --dry-run failed; a package of a name the registry holds for \
                 another crate resolves to that crate in its dependents' verification: rename it"
            );
        }
        bail!("cargo publish --dry-run failed");
    }
    Ok(())
}

/// Whether cargo's `said` tells of a registry it could not reach.
fn is_unreachable(said: &str) -> bool {
    [
        "failed to download",
        "Couldn't resolve host",
        "could not resolve host",
        "network failure",
        "failed to query replaced source",
        "attempting to make an HTTP request, but --offline was specified",
        "spurious network error",
    ]
    .iter()
    .any(|sign| said.contains(sign))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn package(name: &str, dependencies: Value) -> Package {
        let manifest = json!({
            "name": name,
            "license": "MIT OR Apache-2.0",
            "description": "a package",
            "readme": "README.md",
            "dependencies": dependencies,
        });
        let siblings = normal_dependencies(&manifest)
            .filter_map(|dependency| dependency["name"].as_str().map(str::to_owned))
            .collect();
        Package {
            name: name.to_owned(),
            siblings,
            manifest,
        }
    }

    #[test]
    fn siblings_come_first_and_a_test_feature_or_a_missing_version_is_named() {
        let packages: BTreeMap<String, Package> = [
            package(
                "store",
                json!([{"name": "core", "req": "^0.1.0", "kind": null, "features": ["testing"]}]),
            ),
            package("core", json!([])),
            package(
                "facade",
                json!([
                    {"name": "store", "req": "*", "kind": null, "features": []},
                    {"name": "core", "req": "^0.1.0", "kind": "dev", "features": ["testing"]}
                ]),
            ),
        ]
        .into_iter()
        .map(|package| (package.name.clone(), package))
        .collect();
        let order = dependency_order(&packages).expect("no cycle");
        assert_eq!(order, ["core", "store", "facade"]);
        assert_eq!(
            manifest_problems(&packages["store"], &packages),
            [
                "store: its dependency on core turns on `testing`, a feature for tests: move it to \
              [dev-dependencies]"
            ]
        );
        assert_eq!(
            manifest_problems(&packages["facade"], &packages),
            ["facade: depends on store without a version: the registry refuses it"],
            "a dev-dependency may turn on a test feature"
        );
        assert!(manifest_problems(&packages["core"], &packages).is_empty());
    }

    #[test]
    fn a_feature_a_user_turns_on_may_not_turn_on_test_code() {
        let mut facade = package("facade", json!([]));
        facade.manifest["features"] = json!({
            "default": ["store", "testing"],
            "store": ["core/testing"],
            "cuda": ["cuda-backend?/bench", "dep:cuda-backend"],
            "testing": ["core/testing"],
        });
        let packages: BTreeMap<String, Package> = [
            package("core", json!([])),
            package("cuda-backend", json!([])),
        ]
        .into_iter()
        .map(|package| (package.name.clone(), package))
        .collect();
        assert_eq!(
            feature_problems(&facade, &packages),
            [
                "facade: its feature `cuda` turns on `cuda-backend?/bench`, a feature for tests",
                "facade: its feature `default` turns on `testing`, a feature for tests",
                "facade: its feature `store` turns on `core/testing`, a feature for tests",
            ],
            "`testing` forwarding to `core/testing` is a program's tests asking"
        );
    }

    #[test]
    fn a_placeholder_address_and_a_missing_licence_are_named() {
        let mut placeholder = package("core", json!([]));
        placeholder.manifest["repository"] = json!("https://example.invalid/kiln");
        placeholder.manifest["license"] = Value::Null;
        let packages = BTreeMap::new();
        assert_eq!(
            manifest_problems(&placeholder, &packages),
            [
                "core: no `license`",
                "core: `repository` is a placeholder (https://example.invalid/kiln): name a real \
                 one or none"
            ]
        );
        assert!(is_unreachable(
            "error: failed to download from `https://index.crates.io`"
        ));
        assert!(!is_unreachable("error: could not compile `kiln-engine`"));
    }
}
