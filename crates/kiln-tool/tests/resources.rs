//! D4 through the `kiln` binary: `kiln warm` lists the kernels that spill
//! under its table and in its JSON report, and `kiln ls` shows each
//! artifact's registers, spills and shared memory (REGS / SPILLS / SHARED)
//! and carries them in `--json`, read from the artifacts in the store.
//!
//! The CUDA part needs NVRTC: it skips with a printed reason without it,
//! and fails instead when `KILN_REQUIRE_NVRTC=1`.

mod support;

use std::path::{Path, PathBuf};

use kiln_test_support::require;
use serde_json::Value;
use support::{Finished, Scratch, backend, finish, kiln};

/// A kernel that its launch bounds (1024 threads, two blocks a
/// multiprocessor: 32 registers a thread) force to spill its 64 live
/// floats.
const SPILL_CU: &str = r#"// kiln entry: spill
extern "C" __global__ void __launch_bounds__(1024, 2) spill(float* out, int n) {
    float a[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) a[i] = out[i * n + threadIdx.x];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int i = 0; i < 64; ++i) a[i] = a[i] * a[(i + j) % 64] + 1.0f;
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < 64; ++i) total += a[i];
    out[threadIdx.x] = total;
}
"#;

/// A kernel with 1 KiB of shared memory that does not spill.
const TILE_CU: &str = r#"// kiln entry: tile
extern "C" __global__ void tile(float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? y[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % 256];
}
"#;

/// A WGSL kernel with 256 bytes of workgroup memory.
const SHARE_WGSL: &str = r#"// kiln entry: main
var<workgroup> scratch: array<f32, 64>;
@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) local: vec3<u32>) {
    scratch[local.x] = data[local.x];
    workgroupBarrier();
    data[local.x] = scratch[63u - local.x];
}
"#;

fn folder(scratch: &Scratch) -> PathBuf {
    let folder = scratch.folder("kernels");
    for (name, text) in [
        ("spill.cu", SPILL_CU),
        ("tile.cu", TILE_CU),
        ("share.wgsl", SHARE_WGSL),
    ] {
        std::fs::write(folder.join(name), text).expect("a kernel file");
    }
    folder
}

fn warm(store: &Path, folder: &Path, options: &[&str]) -> Finished {
    finish(
        kiln(store, options)
            .arg("warm")
            .args(["--backend", "wgpu,cuda"])
            .arg(folder)
            .env("MESA_SHADER_CACHE_DIR", store.with_extension("mesa")),
    )
}

/// Whether the CUDA part runs here; a printed skip when it does not.
fn cuda_runs(report: &Value) -> bool {
    let cuda = backend(report, "cuda");
    match cuda["unavailable"].as_str() {
        None => true,
        Some(reason) if require::is_required(&["KILN_REQUIRE_NVRTC"]) => {
            panic!("the CUDA part needs NVRTC, and KILN_REQUIRE_NVRTC=1: {reason}")
        }
        Some(reason) => {
            kiln_engine::conformance::skip("D4 through kiln warm and ls on CUDA", reason);
            false
        }
    }
}

/// The `kiln --json ls` entry of the kernel whose name contains `name`.
fn entry<'a>(entries: &'a [Value], name: &str) -> &'a Value {
    entries
        .iter()
        .find(|entry| {
            entry["kind"] == "kernel"
                && entry["key"]["kernel"]
                    .as_str()
                    .is_some_and(|kernel| kernel.contains(name))
        })
        .unwrap_or_else(|| panic!("an entry of {name}: {entries:#?}"))
}

// D4
#[test]
fn d4_warm_lists_spilling_kernels_and_ls_shows_regs_spills_and_shared() {
    let scratch = Scratch::new("cli-d4");
    let kernels = folder(&scratch);
    let store = scratch.join("store");

    let report = warm(&store, &kernels, &["--json"]).succeeded_json();
    assert_eq!(
        backend(&report, "wgpu")["spilling"],
        Value::Array(Vec::new()),
        "{report:#}"
    );
    let cuda = cuda_runs(&report);
    if cuda {
        let spilling = backend(&report, "cuda")["spilling"]
            .as_array()
            .expect("a list of spilling kernels")
            .clone();
        assert_eq!(spilling.len(), 1, "only spill.cu spills: {spilling:#?}");
        assert_eq!(spilling[0]["kernel"], "spill.cu");
        assert!(
            spilling[0]["spills"]
                .as_str()
                .is_some_and(|text| text.contains("B stored")),
            "{spilling:#?}"
        );
        assert!(
            spilling[0]["registers"]
                .as_u64()
                .is_some_and(|registers| registers <= 32),
            "{spilling:#?}"
        );
    }

    // A second run reads every kernel from the store, and still says
    // which spill: the record is the artifact's.
    let again = warm(&store, &kernels, &[]);
    assert!(again.status.success(), "{}\n{}", again.stdout, again.stderr);
    let spill_lines: Vec<&str> = again
        .stdout
        .lines()
        .filter(|line| line.contains(" spills: "))
        .collect();
    if cuda {
        assert_eq!(spill_lines.len(), 1, "{}", again.stdout);
        assert!(
            spill_lines[0].starts_with("cuda spills: spill.cu: "),
            "{}",
            again.stdout
        );
    } else {
        assert!(spill_lines.is_empty(), "{}", again.stdout);
    }

    let listing = finish(&mut kiln(&store, &["ls", "--kernels-only"]));
    assert!(listing.status.success(), "{}", listing.stderr);
    let header = listing.stdout.lines().next().unwrap_or_default();
    for column in ["REGS", "SPILLS", "SHARED"] {
        assert!(header.contains(column), "{}", listing.stdout);
    }
    let row_of = |name: &str| {
        listing
            .stdout
            .lines()
            .find(|line| line.contains(name))
            .unwrap_or_else(|| panic!("a row of {name}: {}", listing.stdout))
            .to_owned()
    };
    assert!(row_of("share.wgsl").contains("256 B"), "{}", listing.stdout);

    let entries = finish(&mut kiln(&store, &["--json", "ls", "--kernels-only"])).succeeded_json();
    let entries = entries.as_array().expect("an array of entries").clone();
    let share = &entry(&entries, "share.wgsl")["resources"];
    assert_eq!(share["shared_memory_bytes"], 256, "{share:#}");
    assert_eq!(share["workgroup_size"], serde_json::json!([64, 1, 1]));
    assert_eq!(share["bindings"], 1);
    assert_eq!(share["spills"], false);
    assert!(share["registers"].is_null(), "WGSL has no register count");
    if !cuda {
        return;
    }
    assert!(row_of("tile.cu").contains("1.0 KiB"), "{}", listing.stdout);
    assert!(
        row_of("spill.cu").contains(" B "),
        "spill bytes in the SPILLS column: {}",
        listing.stdout
    );
    let spill = &entry(&entries, "spill.cu")["resources"];
    assert_eq!(spill["spills"], true, "{spill:#}");
    assert!(
        spill["spill_store_bytes"]
            .as_u64()
            .is_some_and(|bytes| bytes > 0)
    );
    assert!(
        spill["registers"]
            .as_u64()
            .is_some_and(|registers| registers <= 32)
    );
    assert_eq!(spill["max_threads_per_block"], 1024, "launch bounds");
    assert!(
        spill["warnings"].as_array().is_some_and(|warnings| warnings
            .iter()
            .any(|warning| warning.as_str().is_some_and(|text| text.contains("spills")))),
        "the spill warning is kept: {spill:#}"
    );
    let tile = &entry(&entries, "tile.cu")["resources"];
    assert_eq!(tile["shared_memory_bytes"], 1024, "{tile:#}");
    assert_eq!(tile["spills"], false);
    assert_eq!(tile["spill_store_bytes"], 0);
}
