//! `cargo xtask test-backend`: one backend's tests on its real device.

use anyhow::{Result, bail};

/// A backend kiln knows of, and whether its crate has landed.
struct Backend {
    name: &'static str,
    device: &'static str,
    exists: bool,
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "cuda",
        device: "an NVIDIA GPU with its driver (NVRTC compiles without one)",
        exists: false,
    },
    Backend {
        name: "hip",
        device: "an AMD GPU with ROCm (hipRTC compiles without one)",
        exists: false,
    },
    Backend {
        name: "wgpu",
        device: "a Vulkan, Metal or DX12 adapter (lavapipe in CI)",
        exists: false,
    },
];

/// Prints every backend and whether it exists yet.
pub fn list() {
    println!("backends:");
    for backend in BACKENDS {
        let state = if backend.exists {
            "available"
        } else {
            "not built yet"
        };
        println!(
            "  {:<6} {:<14} needs {}",
            backend.name, state, backend.device
        );
    }
}

/// Runs `name`'s tests with `KILN_REQUIRE_DEVICE=1`.
pub fn test(name: &str, _extra: &[&str]) -> Result<()> {
    let Some(backend) = BACKENDS.iter().find(|backend| backend.name == name) else {
        list();
        bail!("there is no backend named `{name}`");
    };
    if !backend.exists {
        list();
        bail!("the {name} backend has not landed yet: there is nothing to test");
    }
    bail!("the {name} backend has no device run yet")
}
