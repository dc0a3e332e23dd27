//! The programs of the workspace's `examples/` folder, built and run by
//! `cargo xtask test` after the tests, so that the code a user copies from
//! keeps working. Each runs where it can: on the device when there is one,
//! compile-only otherwise (it says which and exits 0 either way), on a
//! store of its own so that the user's store is left alone.

use anyhow::{Context, Result, bail};

use crate::{command, setup};

/// An example program of the facade (`crates/kiln`), and the features it
/// needs.
pub struct Example {
    /// The example's name (`examples/<name>.rs`).
    pub name: &'static str,
    /// The facade's features it is built with.
    pub features: &'static str,
}

/// Every example program `cargo xtask test` runs.
pub const EXAMPLES: &[Example] = &[
    Example {
        name: "cudarc_program",
        features: "cuda",
    },
    Example {
        name: "wgpu_program",
        features: "wgpu",
    },
    Example {
        name: "spirv_program",
        features: "wgpu",
    },
    Example {
        name: "hip_compile_only",
        features: "hip",
    },
    Example {
        name: "compile_only",
        features: "cuda",
    },
];

/// Builds and runs every example with `environment`, each on a fresh store
/// under the target folder; fails naming those that failed.
pub fn run_all(environment: &[(String, String)]) -> Result<()> {
    let store = setup::target_directory().join("kiln-examples-store");
    let mut failed = Vec::new();
    for example in EXAMPLES {
        if store.exists() {
            std::fs::remove_dir_all(&store)
                .with_context(|| format!("could not clear {}", store.display()))?;
        }
        let ran = command::cargo(&[
            "run",
            "--package",
            "kiln-gpu",
            "--features",
            example.features,
            "--example",
            example.name,
        ])
        .envs(environment.iter().map(|(key, value)| (key, value)))
        .env("KILN_CACHE_DIR", &store)
        .run(&format!("the example {}", example.name));
        if let Err(error) = ran {
            eprintln!("xtask: {error:#}");
            failed.push(example.name);
        }
    }
    println!(
        "examples: {} ran, {} failed",
        EXAMPLES.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        bail!("the examples failed: {}", failed.join(", "));
    }
    Ok(())
}
