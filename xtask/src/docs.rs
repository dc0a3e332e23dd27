//! The facade's documentation as a crate user browses it: built with the
//! features docs.rs builds it with (its `[package.metadata.docs.rs]`), its
//! crate page must list every backend's target and kernel builder as links
//! into the facade's own pages, and show no link rustdoc left unresolved.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{command, setup};

/// The pages the facade's crate page must link to, one target and one
/// kernel builder per backend: what a user looks for first.
const LISTED: &[&str] = &[
    "cuda/struct.CudaTarget.html",
    "cuda/struct.CudaKernelBuilder.html",
    "hip/struct.HipTarget.html",
    "hip/struct.HipKernelBuilder.html",
    "wgpu/struct.WgpuTarget.html",
    "wgpu/struct.WgslKernelBuilder.html",
];

/// Builds the facade's documentation as docs.rs would (without the nightly
/// `docsrs` cfg) with rustdoc's warnings denied, and checks its crate page.
pub fn check_facade() -> Result<()> {
    let features = docs_rs_features("kiln-gpu")?;
    command::cargo(&[
        "doc",
        "--package",
        "kiln-gpu",
        "--no-deps",
        "--features",
        &features.join(","),
    ])
    .env("RUSTDOCFLAGS", "-D warnings")
    .run("cargo doc of the facade with docs.rs's features")?;
    let folder = setup::target_directory().join("doc").join("kiln");
    let page = std::fs::read_to_string(folder.join("index.html"))
        .with_context(|| format!("reading {}", folder.join("index.html").display()))?;
    let problems = page_problems(&page, &folder);
    if !problems.is_empty() {
        bail!(
            "the facade's crate page (features {}):\n{}",
            features.join(","),
            problems.join("\n")
        );
    }
    println!(
        "docs: the facade's crate page lists {} and every link on it resolves",
        LISTED.join(", ")
    );
    Ok(())
}

/// The features `package`'s `[package.metadata.docs.rs]` names.
fn docs_rs_features(package: &str) -> Result<Vec<String>> {
    let metadata = command::cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ])
    .output("cargo metadata")?;
    let metadata: Value = serde_json::from_slice(&metadata).context("reading cargo metadata")?;
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|manifest| manifest["name"] == package)
        .with_context(|| format!("no package {package} in the workspace"))?;
    let features: Vec<String> = manifest["metadata"]["docs"]["rs"]["features"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|feature| feature.as_str().map(str::to_owned))
        .collect();
    if features.is_empty() {
        bail!(
            "{package}: no [package.metadata.docs.rs] features: docs.rs would build it without its \
             backends"
        );
    }
    Ok(features)
}

/// What is wrong with the crate page `page`, whose files are in `folder`:
/// a page of [`LISTED`] it does not link to, a relative link to no file,
/// and a `[name]` left as text (a link rustdoc did not resolve).
fn page_problems(page: &str, folder: &Path) -> Vec<String> {
    let links = relative_links(page);
    let mut problems: Vec<String> = LISTED
        .iter()
        .filter(|listed| !links.contains(**listed))
        .map(|listed| format!("no link to {listed}"))
        .collect();
    problems.extend(
        links
            .iter()
            .filter(|link| !folder.join(link).exists())
            .map(|link| format!("a link to {link}, which is no file")),
    );
    problems.extend(
        unresolved(page)
            .into_iter()
            .map(|text| format!("`{text}` shows as text: a link rustdoc did not resolve")),
    );
    problems
}

/// The page's `href`s to files of the documentation (no address, no
/// anchor).
fn relative_links(page: &str) -> BTreeSet<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .map(|link| link.split('#').next().unwrap_or_default())
        .filter(|link| !link.is_empty() && !link.contains(':') && !link.starts_with("../"))
        .map(str::to_owned)
        .collect()
}

/// The `[name]`s of the page's prose: examples, scripts and tags left out,
/// a name in brackets is an intra-doc link rustdoc printed as it was
/// written (`[<code>name</code>]`).
fn unresolved(page: &str) -> Vec<String> {
    let main = page.split_once("<main>").map_or(page, |(_, main)| main);
    // Examples index arrays, scripts hold JSON, and code such as `#[test]`
    // holds brackets of its own; a code span inside brackets stays.
    let prose = without(
        &without(main, "<pre", "</pre>", |_| true),
        "<script",
        "</script>",
        |_| true,
    );
    let prose = without(&prose, "<code", "</code>", |code| code.contains(['[', ']']));
    let mut text = String::new();
    let mut in_tag = false;
    for character in prose.chars() {
        match character {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ if !in_tag => text.push(character),
            _ => {}
        }
    }
    text.split('[')
        .skip(1)
        .filter_map(|rest| rest.split_once(']').map(|(inside, _)| inside))
        .filter(|inside| {
            !inside.is_empty()
                && inside
                    .chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '!' | '(' | ')'))
        })
        .map(str::to_owned)
        .collect()
}

/// `html` without the elements from `open` to `close` that `drop` chooses.
fn without(html: &str, open: &str, close: &str, drop: impl Fn(&str) -> bool) -> String {
    let mut kept = String::new();
    let mut rest = html;
    while let Some(start) = rest.find(open) {
        kept.push_str(&rest[..start]);
        let (element, after) = rest[start..]
            .split_once(close)
            .unwrap_or((&rest[start..], ""));
        if !drop(element) {
            kept.push_str(element);
            kept.push_str(close);
        }
        rest = after;
    }
    kept.push_str(rest);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_backend_a_dangling_link_and_an_unresolved_name_are_each_named() {
        let folder = std::env::temp_dir().join(format!("kiln-xtask-docs-{}", std::process::id()));
        std::fs::create_dir_all(folder.join("cuda")).expect("scratch folder");
        std::fs::write(folder.join("cuda/struct.CudaTarget.html"), "").expect("a page");
        let page = "<nav><a href=\"../static.files/x\">x</a></nav><main>\
                    <p><a href=\"cuda/struct.CudaTarget.html\"><code>CudaTarget</code></a>, \
                    [<code>disk</code>] is the store, <code>[\"store\"]</code> and <code>#[test]</code> are code, \
                    <pre>let b = a[i];</pre>\
                    <a href=\"https://docs.rs\">docs</a> <a href=\"mode/index.html#x\">mode</a></p>\
                    </main>";
        let problems = page_problems(page, &folder);
        std::fs::remove_dir_all(&folder).expect("scratch folder removed");
        assert!(
            !problems.iter().any(|p| p.contains("CudaTarget.html")),
            "a listed page linked to and present: {problems:?}"
        );
        assert!(problems.contains(&"no link to hip/struct.HipTarget.html".to_owned()));
        assert!(problems.contains(&"a link to mode/index.html, which is no file".to_owned()));
        assert!(
            problems.contains(&"`disk` shows as text: a link rustdoc did not resolve".to_owned())
        );
        assert!(
            !problems.iter().any(|p| p.contains("store\"")),
            "brackets in code are no link: {problems:?}"
        );
        assert!(
            !problems.iter().any(|p| p.contains("`i`")),
            "an example's index is no link: {problems:?}"
        );
    }
}
