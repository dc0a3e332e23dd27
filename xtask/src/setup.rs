//! The system parts kiln's tests use for real — compilers, drivers,
//! servers — each checked for and installed when missing.
//!
//! Every part says how to tell it is present and how to install it. `test`
//! runs the installs before any test, and checks again afterwards, so a
//! missing install step fails here with the part's name rather than later as
//! a skipped or failing test.

mod apt;
pub mod nvrtc;
pub mod s3;

use std::path::PathBuf;

use anyhow::{Result, bail};

/// One system part the tests need.
pub struct SystemPart {
    /// What it is, for messages.
    pub name: &'static str,
    /// Which tests need it.
    pub needed_by: &'static str,
    /// Whether it is installed.
    pub is_present: fn() -> bool,
    /// Installs it.
    pub install: fn() -> Result<()>,
    /// Environment variables the tests need to find it, once present.
    pub environment: fn() -> Vec<(String, String)>,
}

/// hipRTC from Debian's ROCm 5.2: compiles for gfx90a, gfx908 and gfx1030
/// without a GPU.
const HIP_PACKAGES: &[&str] = &[
    "libamdhip64-5",
    "libamdhip64-dev",
    "libhiprtc-builtins5",
    "libamd-comgr2",
];

/// A Vulkan loader and Mesa's drivers, lavapipe among them: a software
/// Vulkan device on any machine.
const VULKAN_PACKAGES: &[&str] = &["libvulkan1", "mesa-vulkan-drivers"];

/// The environment the wgpu tests need: Mesa's shader cache in a folder of
/// this run's own, so that no test run finds pipelines an earlier one left
/// in the user's cache (a pipeline cache test must see the driver compile).
fn vulkan_environment() -> Vec<(String, String)> {
    let folder =
        std::env::temp_dir().join(format!("kiln-mesa-shader-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    if let Err(error) = std::fs::create_dir_all(&folder) {
        eprintln!(
            "xtask: setup: could not create {}: {error}",
            folder.display()
        );
    }
    vec![(
        "MESA_SHADER_CACHE_DIR".to_owned(),
        folder.display().to_string(),
    )]
}

/// glslang's compiler (`glslangValidator`) and the SPIR-V tools
/// (`spirv-val`, `spirv-link`): kiln-spirv-kernels compiles its GLSL test
/// and example kernels to SPIR-V with them when it builds.
const GLSL_PACKAGES: &[&str] = &["glslang-tools", "spirv-tools"];

/// The environment the SPIR-V kernels' build needs: the installed tools
/// must be used, so a build that cannot find them fails instead of
/// leaving the SPIR-V tests to skip.
fn glsl_environment() -> Vec<(String, String)> {
    vec![("KILN_REQUIRE_GLSLANG".to_owned(), "1".to_owned())]
}

/// Redis 7 from Debian (`redis-server`, which brings `redis-cli`): the
/// remote tier's tests start their own servers and clusters on loopback
/// ports.
const REDIS_PACKAGES: &[&str] = &["redis-server"];

/// The environment the remote tier's tests need: the installed server
/// must be used, so a test that cannot find it fails instead of skipping.
fn redis_environment() -> Vec<(String, String)> {
    vec![("KILN_REQUIRE_REDIS".to_owned(), "1".to_owned())]
}

/// What makes the tests that need root run rather than skip: as root (CI
/// runs as root), `KILN_REQUIRE_ROOT=1`, so that a full-disk, read-only or
/// other-user test that cannot run fails instead of skipping unseen. A
/// `KILN_REQUIRE_ROOT` the caller set wins.
pub fn root_environment() -> Vec<(String, String)> {
    root_requirement(
        apt::is_root(),
        std::env::var_os("KILN_REQUIRE_ROOT").is_some(),
    )
}

fn root_requirement(is_root: bool, caller_chose: bool) -> Vec<(String, String)> {
    if is_root && !caller_chose {
        vec![("KILN_REQUIRE_ROOT".to_owned(), "1".to_owned())]
    } else {
        Vec::new()
    }
}

/// Every part the tests need. The backends add theirs as they land.
pub fn parts() -> Vec<SystemPart> {
    vec![
        SystemPart {
            name: "NVRTC 13.0 (PyPI wheel nvidia-cuda-nvrtc==13.0.88)",
            needed_by: "CUDA backend's compile tests (backends/kiln-cuda)",
            is_present: nvrtc::is_present,
            install: nvrtc::install,
            environment: nvrtc::environment,
        },
        SystemPart {
            name: "CUDA 13.0 toolkit headers (PyPI wheels nvidia-cuda-runtime==13.0.88, \
                   nvidia-cuda-cccl==13.0.85)",
            needed_by: "CUDA kernels including <cuda_fp16.h> or <cooperative_groups.h> in the \
                        tests (backends/kiln-cuda, crates/kiln-tool)",
            is_present: || {
                std::env::var_os("KILN_CUDA_INCLUDE").is_some_and(|value| !value.is_empty())
                    || nvrtc::CUDA_HEADERS_13.is_installed()
            },
            install: || nvrtc::CUDA_HEADERS_13.install(),
            environment: nvrtc::headers_environment,
        },
        SystemPart {
            name: "NVRTC 12.8 (PyPI wheel nvidia-cuda-nvrtc-cu12==12.8.93)",
            needed_by: "second run of the CUDA backend's tests, and the program outside the \
                        workspace (tests/outside)",
            is_present: || nvrtc::NVRTC_12.is_installed(),
            install: || nvrtc::NVRTC_12.install(),
            environment: Vec::new,
        },
        SystemPart {
            name: "hipRTC 5.2 (Debian: libamdhip64-5 libamdhip64-dev libhiprtc-builtins5 libamd-comgr2)",
            needed_by: "HIP backend's compile and conformance tests (backends/kiln-hip)",
            is_present: || apt::are_installed(HIP_PACKAGES),
            install: || apt::install(HIP_PACKAGES),
            environment: Vec::new,
        },
        SystemPart {
            name: "Vulkan loader and Mesa's lavapipe (Debian: libvulkan1 mesa-vulkan-drivers)",
            needed_by: "wgpu backend's device and conformance tests (backends/kiln-wgpu)",
            is_present: || apt::are_installed(VULKAN_PACKAGES),
            install: || apt::install(VULKAN_PACKAGES),
            environment: vulkan_environment,
        },
        SystemPart {
            name: "glslang and SPIR-V tools (Debian: glslang-tools spirv-tools)",
            needed_by: "the SPIR-V kernels of the wgpu backend's tests and examples \
                        (crates/kiln-spirv-kernels)",
            is_present: || apt::are_installed(GLSL_PACKAGES),
            install: || apt::install(GLSL_PACKAGES),
            environment: glsl_environment,
        },
        SystemPart {
            name: "Redis 7 (Debian: redis-server)",
            needed_by: "remote tier's store, cluster and fault tests (crates/kiln-remote)",
            is_present: || apt::are_installed(REDIS_PACKAGES),
            install: || apt::install(REDIS_PACKAGES),
            environment: redis_environment,
        },
        SystemPart {
            name: "Garage 2.5.0, an S3 server (cargo install garage, into the target directory)",
            needed_by: "object-store tier's store, sharing and fault tests (crates/kiln-bucket)",
            is_present: s3::is_present,
            install: s3::install,
            environment: s3::environment,
        },
    ]
}

/// Where installed parts live: `kiln-system` in cargo's target directory
/// (`CARGO_TARGET_DIR`, else the workspace's `target`), so `cargo clean`
/// removes them and git ignores them.
pub fn system_directory() -> PathBuf {
    target_directory().join("kiln-system")
}

/// Cargo's target directory for this workspace.
pub fn target_directory() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|directory| !directory.is_empty()) {
        Some(directory) => workspace_root().join(directory),
        None => workspace_root().join("target"),
    }
}

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    let xtask = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().map(PathBuf::from).unwrap_or(xtask)
}

/// Installs every missing part, checks each is present afterwards, and
/// returns the environment the tests need.
pub fn ensure_all() -> Result<Vec<(String, String)>> {
    let parts = parts();
    if parts.is_empty() {
        eprintln!("xtask: setup: no system parts are needed yet");
    }
    let mut environment = Vec::new();
    for part in parts {
        if (part.is_present)() {
            eprintln!("xtask: setup: {} is present", part.name);
        } else {
            eprintln!(
                "xtask: setup: installing {} (for {})",
                part.name, part.needed_by
            );
            (part.install)()?;
            if !(part.is_present)() {
                bail!(
                    "{} is still missing after its install step; the {} cannot run",
                    part.name,
                    part.needed_by
                );
            }
        }
        environment.extend((part.environment)());
    }
    Ok(environment)
}

#[cfg(test)]
mod tests {
    use super::root_requirement;

    #[test]
    fn root_requires_the_root_tests_unless_the_caller_chose() {
        assert_eq!(
            root_requirement(true, false),
            [("KILN_REQUIRE_ROOT".to_owned(), "1".to_owned())]
        );
        assert!(root_requirement(true, true).is_empty());
        assert!(root_requirement(false, false).is_empty());
    }
}
