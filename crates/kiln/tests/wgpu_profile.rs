//! Compile-only mode for a named wgpu adapter (L11): a program that
//! chooses its kernels by the adapter's features, run under
//! `KILN_MODE=compile-only` with `KILN_WGPU_PROFILE` naming the adapter
//! (a built-in profile, or a profile file written on the adapter's
//! machine), fills the store with exactly what it loads on that adapter, so
//! its run there compiles nothing. Each run is a child process, since the
//! mode's variables belong to the whole process.
#![cfg(feature = "wgpu")]

mod support;

use std::path::Path;

use kiln::mode;
use kiln::wgpu::{AdapterProfile, WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel, wgpu};
use kiln::{KernelId, KernelLoader};
use kiln_test_support::{Scratch, child, skip};
use support::{load_in_one_batch, report, value, wgpu_target};

/// The variable that tells a child what to do.
const CHILD: &str = "KILN_FACADE_WGPU_PROFILE_CHILD";
const TEST: &str = "a_program_prebuilt_for_an_adapter_profile_compiles_nothing_on_that_adapter";

/// The kernels of the program: f16 ones where the target has f16, f32
/// ones where not, and an i64 one where the target has i64.
fn kernels(features: wgpu::Features) -> Vec<WgslKernel> {
    let half = features.contains(wgpu::Features::SHADER_F16);
    let mut kernels: Vec<WgslKernel> = (0..3u32)
        .map(|number| {
            let (enable, scalar, suffix) = if half {
                ("enable f16;\n", "f16", "h")
            } else {
                ("", "f32", "")
            };
            WgslKernel::builder(
                KernelId::named("wgpu_profile.scale")
                    .parameter(&number)
                    .parameter(&half),
                "main",
            )
            .source(format!(
                "{enable}@group(0) @binding(0) var<storage, read_write> y: array<{scalar}>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{ \
                 y[id.x] = y[id.x] * {number}.0{suffix}; }}"
            ))
        })
        .collect();
    if features.contains(wgpu::Features::SHADER_INT64) {
        kernels.push(
            WgslKernel::builder(KernelId::named("wgpu_profile.wide"), "main").source(
                "@group(0) @binding(0) var<storage, read_write> y: array<i64>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) { y[id.x] = y[id.x] * 3li; }",
            ),
        );
    }
    kernels
}

/// On the Vulkan adapter, or compile-only in compile-only mode: every
/// kernel of [`kernels`] for the target's features loaded.
fn program() {
    let Some(target) = wgpu_target() else {
        return;
    };
    let compile_only = target.device().is_none();
    let features = target.features();
    let mut loader = KernelLoader::new(target);
    let kernels = kernels(features);
    let batch = load_in_one_batch(&mut loader, &kernels, &WgpuVariant);
    println!(
        "report: no_adapter=0 compile_only={compile_only} kernels={} {batch}",
        kernels.len()
    );
}

/// This test binary again as the program, on the store in `root`; in
/// compile-only mode for `profile` when one is given (`Some("")`: no
/// profile named).
fn run(root: &Path, profile: Option<&str>) -> Vec<(String, String)> {
    let mut command = support::program(
        TEST,
        CHILD,
        "program",
        &[mode::MODE_VARIABLE, mode::WGPU_PROFILE_VARIABLE],
    );
    command.env("KILN_CACHE_DIR", root);
    // The program's later runs would load their kernels ahead from its
    // warm-start profile, in no batch: the test counts its batch.
    command.env("KILN_PROFILE", "0");
    if let Some(profile) = profile {
        command.env(mode::MODE_VARIABLE, "compile-only");
        if !profile.is_empty() {
            command.env(mode::WGPU_PROFILE_VARIABLE, profile);
        }
    }
    report(command)
}

/// The adapter here when it is lavapipe, else the reason to skip.
fn lavapipe() -> Result<WgpuDevice, String> {
    let device = WgpuDevice::open().map_err(|error| format!("no Vulkan adapter: {error}"))?;
    if device.info().name.contains("llvmpipe") {
        Ok(device)
    } else {
        Err(format!(
            "the adapter is {}, not lavapipe",
            device.describe()
        ))
    }
}

// L11: the built-in profile says what lavapipe has.
#[test]
fn the_built_in_lavapipe_profile_is_what_lavapipe_has() {
    let device = match lavapipe() {
        Ok(device) => device,
        Err(reason) => return skip("the lavapipe profile against lavapipe", &reason),
    };
    let profile = AdapterProfile::built_in("lavapipe").expect("built in");
    assert_eq!(
        kiln::wgpu::feature_names(profile.features()),
        kiln::wgpu::feature_names(AdapterProfile::of_device(&device).features()),
        "the built-in lavapipe profile against {}",
        device.describe()
    );
}

// L11: compile-only for the adapter named, then the program on that
// adapter compiles nothing; prebuilt for no adapter in particular, the
// same program compiles there what it chooses by features it lacked.
#[test]
fn a_program_prebuilt_for_an_adapter_profile_compiles_nothing_on_that_adapter() {
    if child::is_child(CHILD, "program") {
        return program();
    }
    let device = match lavapipe() {
        Ok(device) => device,
        Err(reason) => return skip("compile-only for lavapipe, then lavapipe", &reason),
    };
    let scratch = Scratch::new("facade-wgpu-profile");
    let file = scratch.join("here.profile");
    std::fs::write(&file, AdapterProfile::of_device(&device).to_text()).expect("profile file");
    let file = file.to_str().expect("a UTF-8 path").to_owned();
    for (case, profile) in [("built-in", "lavapipe"), ("file", file.as_str())] {
        let root = scratch.join(case);
        let built = run(&root, Some(profile));
        assert_eq!(value(&built, "compile_only"), "true", "{case}: {built:?}");
        assert_eq!(
            value(&built, "compiled"),
            value(&built, "kernels"),
            "{case}: {built:?}"
        );
        let ran = run(&root, None);
        assert_eq!(value(&ran, "compile_only"), "false", "{case}: {ran:?}");
        assert_eq!(
            value(&ran, "kernels"),
            value(&built, "kernels"),
            "{case}: {ran:?}"
        );
        assert_eq!(value(&ran, "compiled"), "0", "{case}: {ran:?}");
        assert_eq!(
            value(&ran, "from_store"),
            value(&ran, "kernels"),
            "{case}: {ran:?}"
        );
    }
    // Without a profile the program chose for an adapter without f16 or
    // i64: where lavapipe has either, its run compiles what it chose then.
    let chooses = device.features() & (wgpu::Features::SHADER_F16 | wgpu::Features::SHADER_INT64);
    if chooses.is_empty() {
        return skip(
            "a prebuild without a profile missing lavapipe's kernels",
            "this lavapipe has neither f16 nor i64",
        );
    }
    let root = scratch.join("baseline");
    let built = run(&root, Some(""));
    assert_eq!(value(&built, "compile_only"), "true", "{built:?}");
    let ran = run(&root, None);
    assert_ne!(value(&ran, "compiled"), "0", "{ran:?}");
}

// L11: a profile that names nothing is refused, naming the built-in ones.
#[test]
fn compile_only_mode_with_an_unknown_profile_names_the_built_in_ones() {
    let _compile_only = mode::ProcessModeOverride::new(mode::ProcessMode::CompileOnly(
        mode::CompileOnly::default().wgpu_profile("no-such-adapter"),
    ));
    let error = WgpuTarget::open().expect_err("no such profile");
    let message = error.to_string();
    assert!(message.contains("no-such-adapter"), "{message}");
    assert!(message.contains("lavapipe"), "{message}");
}
