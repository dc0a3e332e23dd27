//! What the wgpu tests share: one device per test process (skipped with a
//! printed reason where there is no adapter), fresh disk stores, the
//! example kernels, and a tiny random generator.

#![allow(
    dead_code,
    reason = "each test binary uses its own part of the support"
)]

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use kiln_engine::store::ArtifactStore;
use kiln_engine::{ArtifactId, Kernel, KernelId, KernelLoader, LoaderConfig};
use kiln_store::{DiskStore, StoreConfig};
#[allow(
    unused_imports,
    reason = "each test binary uses its own part of the support"
)]
pub use kiln_test_support::Random;
use kiln_wgpu::{WgpuDevice, WgpuTarget, WgpuVariant, WgslKernel};

/// The device every test of this process shares, or why there is none.
pub fn device_or_reason() -> Result<WgpuDevice, String> {
    static DEVICE: OnceLock<Result<WgpuDevice, String>> = OnceLock::new();
    DEVICE
        .get_or_init(|| WgpuDevice::open().map_err(|error| error.to_string()))
        .clone()
}

/// The shared device, or `None` after printing why `what` skips (a failure
/// instead when `KILN_REQUIRE_DEVICE=1`).
pub fn device(what: &str) -> Option<WgpuDevice> {
    match device_or_reason() {
        Ok(device) => {
            kiln_test_support::say(&format!("{what}: on {}", device.describe()));
            Some(device)
        }
        Err(reason) => {
            kiln_engine::conformance::skip(what, &reason);
            None
        }
    }
}

/// A new, empty folder under the system's temporary folder.
pub fn fresh_folder(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let folder = std::env::temp_dir().join(format!(
        "kiln-wgpu-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).expect("the temporary folder is writable");
    folder
}

/// A disk store in `folder`.
pub fn store_at(folder: &std::path::Path) -> Arc<dyn ArtifactStore> {
    Arc::new(
        DiskStore::open(StoreConfig::at(folder)).expect("a disk store opens in a fresh folder"),
    )
}

/// A disk store in a new folder.
pub fn fresh_store(what: &str) -> Arc<dyn ArtifactStore> {
    store_at(&fresh_folder(what))
}

/// A loader on `target` with four workers, whatever the machine has.
pub fn loader(target: WgpuTarget) -> KernelLoader<WgpuTarget> {
    KernelLoader::with_config(
        target,
        LoaderConfig {
            parallelism: NonZeroUsize::new(4).expect("4 is not zero"),
            // A second loader on a store stands in for the next process:
            // no warm-start profile loads ahead of what the tests count.
            profile: false,
            ..LoaderConfig::default()
        },
    )
}

/// `kernel`'s artifact id.
pub fn id_of(kernel: &WgslKernel) -> ArtifactId<WgpuVariant> {
    ArtifactId::new(kernel.id(), WgpuVariant)
}

/// The WGSL kernels of `examples/kernels`, embedded when the tests are
/// built: a test binary packed for another machine (`cargo xtask
/// test-backend wgpu`) reads no file of the machine that built it, and runs
/// from any folder.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "conv1d.wgsl",
        include_str!("../../../../examples/kernels/conv1d.wgsl"),
    ),
    (
        "conv2d.wgsl",
        include_str!("../../../../examples/kernels/conv2d.wgsl"),
    ),
    (
        "dot.wgsl",
        include_str!("../../../../examples/kernels/dot.wgsl"),
    ),
    (
        "fused_scale_bias.wgsl",
        include_str!("../../../../examples/kernels/fused_scale_bias.wgsl"),
    ),
    (
        "gelu.wgsl",
        include_str!("../../../../examples/kernels/gelu.wgsl"),
    ),
    (
        "histogram.wgsl",
        include_str!("../../../../examples/kernels/histogram.wgsl"),
    ),
    (
        "layernorm.wgsl",
        include_str!("../../../../examples/kernels/layernorm.wgsl"),
    ),
    (
        "log_softmax.wgsl",
        include_str!("../../../../examples/kernels/log_softmax.wgsl"),
    ),
    (
        "matmul_naive.wgsl",
        include_str!("../../../../examples/kernels/matmul_naive.wgsl"),
    ),
    (
        "matmul_register_tiled.wgsl",
        include_str!("../../../../examples/kernels/matmul_register_tiled.wgsl"),
    ),
    (
        "matmul_tiled.wgsl",
        include_str!("../../../../examples/kernels/matmul_tiled.wgsl"),
    ),
    (
        "reduce_max.wgsl",
        include_str!("../../../../examples/kernels/reduce_max.wgsl"),
    ),
    (
        "reduce_sum.wgsl",
        include_str!("../../../../examples/kernels/reduce_sum.wgsl"),
    ),
    (
        "relu.wgsl",
        include_str!("../../../../examples/kernels/relu.wgsl"),
    ),
    (
        "saxpy.wgsl",
        include_str!("../../../../examples/kernels/saxpy.wgsl"),
    ),
    (
        "scan_exclusive.wgsl",
        include_str!("../../../../examples/kernels/scan_exclusive.wgsl"),
    ),
    (
        "scan_inclusive.wgsl",
        include_str!("../../../../examples/kernels/scan_inclusive.wgsl"),
    ),
    (
        "softmax.wgsl",
        include_str!("../../../../examples/kernels/softmax.wgsl"),
    ),
    (
        "transpose.wgsl",
        include_str!("../../../../examples/kernels/transpose.wgsl"),
    ),
];

/// The text of `examples/kernels/<name>`.
pub fn example(name: &str) -> String {
    EXAMPLES
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(_, text)| (*text).to_owned())
        .unwrap_or_else(|| {
            panic!(
                "examples/kernels/{name} is not embedded in the tests; they hold {:?}",
                EXAMPLES.iter().map(|(file, _)| file).collect::<Vec<_>>()
            )
        })
}

/// The example kernel `name` with `constants`.
pub fn example_kernel(name: &str, constants: &[(&str, f64)]) -> WgslKernel {
    let mut builder =
        WgslKernel::builder(KernelId::named("tests.example").parameter(name), "main").label(name);
    for (constant, value) in constants {
        builder = builder.constant(*constant, *value);
    }
    builder.source(example(name))
}

/// A kernel that doubles its buffer, with `index` in its text so that every
/// index gives another text.
/// A kernel like [`distinct`]'s whose generator takes 25 ms, as user code
/// that builds a large shader does, counted in `overlap`: kernels lowered
/// at once are seen to overlap (L5).
pub fn lasting(
    index: usize,
    overlap: &std::sync::Arc<kiln_engine::conformance::Overlap>,
) -> WgslKernel {
    let overlap = std::sync::Arc::clone(overlap);
    WgslKernel::builder(KernelId::named("tests.lasting").parameter(&index), "main").generator(
        move || {
            overlap.during(|| std::thread::sleep(std::time::Duration::from_millis(25)));
            Ok(format!(
                "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
                 \x20   if id.x < arrayLength(&data) {{ data[id.x] = data[id.x] * 3.0 + {index}.0; }}\n\
                 }}\n"
            ))
        },
    )
}

pub fn distinct(index: usize) -> WgslKernel {
    WgslKernel::builder(KernelId::named("tests.distinct").parameter(&index), "main").generator(
        move || {
            Ok(format!(
                "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
                 \x20   if id.x < arrayLength(&data) {{ data[id.x] = data[id.x] * 2.0 + {index}.0; }}\n\
                 }}\n"
            ))
        },
    )
}

/// WGSL whose first error is on line 3, column 26 (an operator without its
/// right operand), with an undeclared name after it.
pub const BROKEN: &str = "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
\x20   let x = data[id.x] + ;\n\
\x20   data[id.x] = x + undefined_thing;\n\
}\n";

/// A kernel whose source does not parse.
pub fn broken(index: usize) -> WgslKernel {
    WgslKernel::builder(KernelId::named("tests.broken").parameter(&index), "main")
        .generator(|| Ok(BROKEN.to_owned()))
}

/// `values` as the bytes a storage buffer holds.
pub fn bytes_of(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

/// `u32`s as bytes.
pub fn bytes_of_u32(values: &[u32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

/// The `f32`s `bytes` hold.
pub fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|chunk| f32::from_le_bytes(chunk.try_into().expect("four bytes")))
        .collect()
}

/// The `u32`s `bytes` hold.
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|chunk| u32::from_le_bytes(chunk.try_into().expect("four bytes")))
        .collect()
}

/// Asserts `got` is `expected` within `tolerance`, relative to the larger
/// magnitude (and absolute near zero).
pub fn assert_close(what: &str, got: &[f32], expected: &[f32], tolerance: f32) {
    assert_eq!(got.len(), expected.len(), "{what}: lengths");
    for (index, (g, e)) in got.iter().zip(expected).enumerate() {
        let scale = g.abs().max(e.abs()).max(1.0);
        assert!(
            (g - e).abs() <= tolerance * scale,
            "{what}: element {index} is {g}, expected {e}"
        );
    }
}

/// The SPIR-V module `name` of kiln-spirv-kernels (GLSL compiled when the
/// tests were built, embedded in them), or `None` after printing why
/// `what` skips (a failure instead when `KILN_REQUIRE_DEVICE=1`).
pub fn spirv(what: &str, name: &str) -> Option<&'static [u8]> {
    match kiln_spirv_kernels::module(name) {
        Ok(bytes) => Some(bytes),
        Err(reason) => {
            kiln_engine::conformance::skip(what, &reason);
            None
        }
    }
}

/// A SPIR-V kernel of module `name`'s `entry`, with `constants`.
pub fn spirv_kernel(
    bytes: &[u8],
    name: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> WgslKernel {
    let mut builder = WgslKernel::builder(KernelId::named("tests.spirv").parameter(name), entry)
        .label(format!("{name}.spv"));
    for (constant, value) in constants {
        builder = builder.constant(*constant, *value);
    }
    builder.spirv(bytes)
}

/// A device on the Vulkan adapter here created by the test itself with no
/// optional feature, as a program's own device may be; `None` where there
/// is no adapter.
pub fn featureless_device() -> Option<WgpuDevice> {
    let instance = kiln_wgpu::wgpu::Instance::new(kiln_wgpu::wgpu::InstanceDescriptor {
        backends: kiln_wgpu::wgpu::Backends::VULKAN,
        ..kiln_wgpu::wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = ready(instance.request_adapter(&Default::default())).ok()?;
    let (device, queue) = ready(adapter.request_device(&kiln_wgpu::wgpu::DeviceDescriptor {
        label: Some("featureless"),
        required_features: kiln_wgpu::wgpu::Features::empty(),
        ..Default::default()
    }))
    .ok()?;
    Some(WgpuDevice::new(device, queue))
}

/// The output of a future wgpu's native backend has ready at once.
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::yield_now();
    }
}
