//! The child-process harness of the facade's tests: a program's variables
//! belong to its whole process, so each case runs this test binary again
//! as the program, with the parent's store and mode variables removed, and
//! reads the one `report: ` line it prints.

// Each test binary uses its own part of this module, and some parts only
// under a backend's feature.
#![allow(dead_code, reason = "shared by several test binaries")]

use std::process::Command;

use kiln::{ArtifactId, CompilationTarget, Kernel, KernelLoader, KernelOutcome};
use kiln::{KernelOf, VariantOf};
use kiln_test_support::child;

/// This test binary again, running `test` as the child `role` (told by
/// `child` set to it), with every `KILN_CACHE_*` variable of the parent's
/// environment removed, and each of `also`: a name, or a prefix ending in
/// `*`.
pub fn program(test: &str, child: &str, role: &str, also: &[&str]) -> Command {
    let mut command = child::rerun(test, child, role);
    for (variable, _) in std::env::vars_os() {
        let name = variable.to_string_lossy();
        let removed = |pattern: &&str| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        };
        if name.starts_with("KILN_CACHE_") || also.iter().any(removed) {
            command.env_remove(&variable);
        }
    }
    command
}

/// What the child `command` printed after `report: `, once it ran and
/// succeeded.
pub fn report_line(mut command: Command) -> String {
    let output = command.output().expect("the test binary starts again");
    assert!(output.status.success(), "{}", child::describe(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .find_map(|line| line.split_once("report: ").map(|(_, rest)| rest.to_owned()))
        .unwrap_or_else(|| panic!("no report: {}", child::describe(&output)))
}

/// The child's report line as `key=value` pairs.
pub fn report(command: Command) -> Vec<(String, String)> {
    report_line(command)
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The value of `key` in a report.
pub fn value<'a>(report: &'a [(String, String)], key: &str) -> &'a str {
    report
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value.as_str())
        .unwrap_or_else(|| panic!("no {key} in {report:?}"))
}

/// Asks `loader` for every kernel of `kernels` in one batch, loads each,
/// and says what the batch did, for a report line: `compiled=N
/// from_store=M`.
pub fn load_in_one_batch<T>(
    loader: &mut KernelLoader<T>,
    kernels: &[KernelOf<T>],
    variant: &VariantOf<T>,
) -> String
where
    T: CompilationTarget,
    KernelOf<T>: Clone + Sized,
{
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), variant.clone());
    }
    for kernel in kernels {
        let id = ArtifactId::new(kernel.id(), variant.clone());
        loader
            .load(kernel, &id)
            .unwrap_or_else(|error| panic!("{error}"));
    }
    let batch = &loader.records()[0];
    format!(
        "compiled={} from_store={}",
        batch.count(KernelOutcome::Compiled),
        batch.count(KernelOutcome::FromStore),
    )
}

/// Four WGSL kernels named `name` with a parameter each, writing their
/// number: what a wgpu program asks for.
#[cfg(feature = "wgpu")]
pub fn fill_kernels(name: &'static str) -> Vec<kiln::wgpu::WgslKernel> {
    (0..4)
        .map(|number: u32| {
            kiln::wgpu::WgslKernel::builder(kiln::KernelId::named(name).parameter(&number), "main")
                .source(format!(
                    "@group(0) @binding(0) var<storage, read_write> y: array<f32>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{ y[id.x] = {number}.0; }}"
                ))
        })
        .collect()
}

/// The wgpu target a program opens (on the Vulkan adapter, or compile-only
/// in compile-only mode); `None` after reporting `no_adapter=1`, and why on
/// standard error.
#[cfg(feature = "wgpu")]
pub fn wgpu_target() -> Option<kiln::wgpu::WgpuTarget> {
    match kiln::wgpu::WgpuTarget::open() {
        Ok(target) => Some(target),
        Err(error) => {
            println!("report: no_adapter=1");
            eprintln!("no adapter: {error}");
            None
        }
    }
}
