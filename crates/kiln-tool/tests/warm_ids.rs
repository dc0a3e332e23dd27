//! A program after `kiln warm` loads what it stored by id (L11): `kiln
//! warm` builds each C++ module with the builder calls a program makes
//! (`CudaKernel::of_file`, the header's entries, options and defines, the
//! file's text to `source`), so a program that builds the same kernels the
//! same way asks for the ids `kiln warm` stored under: no miss, nothing
//! lowered, no lookup by text, nothing rekeyed or written. Real NVRTC,
//! compile-only for sm_90, through the real binary.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use kiln_engine::{
    ArtifactId, ArtifactStore, Kernel, KernelLoader, KernelOutcome, LoaderConfig, LoaderStatistics,
};
use kiln_store::{DiskStore, StoreConfig};
use support::{Scratch, cuda_row, finish, kiln};

/// The first kernel file: three entries (a template twice), two
/// specializations, an option, a define, a sibling header and a standard
/// one.
const GEMM: &str = r#"// kiln entry: gemm_naive gemm_tiled<16> gemm_tiled<32>
// kiln specialize: ALPHA=1.0f
// kiln specialize: ALPHA=2.0f
// kiln define: BETA=0.0f
// kiln options: --use_fast_math
#include <cstdint>
#include "tiles.h"

extern "C" __global__ void gemm_naive(const float* a, const float* b, float* c, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < n && col < n) {
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += a[row * n + k] * b[k * n + col];
        c[row * n + col] = ALPHA * sum + BETA * c[row * n + col];
    }
}

template <int T>
__global__ void gemm_tiled(const float* a, const float* b, float* c, int n) {
    __shared__ float as[T][T];
    __shared__ float bs[T][T];
    int row = blockIdx.y * T + threadIdx.y;
    int col = blockIdx.x * T + threadIdx.x;
    float sum = 0.0f;
    for (int tile = 0; tile < n / T; ++tile) {
        as[threadIdx.y][threadIdx.x] = a[row * n + tile * T + threadIdx.x];
        bs[threadIdx.y][threadIdx.x] = b[(tile * T + threadIdx.y) * n + col];
        __syncthreads();
        sum += tile_dot<T>(as[threadIdx.y], bs, threadIdx.x);
        __syncthreads();
    }
    c[row * n + col] = ALPHA * sum + BETA * c[row * n + col];
}
"#;

/// The sibling header `gemm.cu` includes.
const TILES: &str = r#"#pragma once
template <int T>
__device__ float tile_dot(const float* row, const float (*column)[T], unsigned x) {
    float sum = 0.0f;
    for (int k = 0; k < T; ++k) sum += row[k] * column[k][x];
    return sum;
}
"#;

/// The second kernel file, in a folder of its own: two entries (one a
/// template), a header from an include folder its header names, no
/// specialization.
const REDUCE: &str = r#"// kiln entry: block_sum<128>
// kiln entry: lane_ids
// kiln include: ../include
#include <lanes.cuh>

template <int B>
__global__ void block_sum(const float* x, float* out) {
    __shared__ float part[B];
    part[threadIdx.x] = x[blockIdx.x * B + threadIdx.x];
    __syncthreads();
    for (int step = B / 2; step > 0; step /= 2) {
        if (threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

extern "C" __global__ void lane_ids(int* out) { out[threadIdx.x] = lane_of(threadIdx.x); }
"#;

/// The header of the include folder.
const LANES: &str =
    "#pragma once\n__device__ int lane_of(unsigned thread) { return thread % 32; }\n";

/// The folder `kiln warm` is given: `gemm.cu` with `tiles.h` beside it,
/// `ops/reduce.cu` with `include/lanes.cuh`.
fn kernel_folder(scratch: &Scratch) -> PathBuf {
    let kernels = scratch.folder("kernels");
    let write = |path: PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("the folder");
        std::fs::write(path, text).expect("a kernel file");
    };
    write(kernels.join("gemm.cu"), GEMM);
    write(kernels.join("tiles.h"), TILES);
    write(kernels.join("ops/reduce.cu"), REDUCE);
    write(kernels.join("include/lanes.cuh"), LANES);
    kernels
}

/// The kernels of the folder as a program builds them, the documented
/// way: `of_file` with the file's path under the folder warmed, the
/// header's entries in order, its options and defines as `CudaOptions`,
/// the file's whole text and its folders.
fn program_kernels(kernels: &Path) -> Vec<CudaKernel> {
    let gemm = ["1.0f", "2.0f"].map(|alpha| {
        CudaKernel::of_file("gemm.cu", "gemm_naive")
            .entry("gemm_tiled<16>")
            .entry("gemm_tiled<32>")
            .source_folder(kernels)
            .options(
                CudaOptions::default()
                    .fast_math(true)
                    // In any order: defines are kept by name.
                    .define("BETA", "0.0f")
                    .define("ALPHA", alpha),
            )
            .source(GEMM)
    });
    let reduce = CudaKernel::of_file("ops/reduce.cu", "block_sum<128>")
        .entry("lane_ids")
        .source_folder(kernels.join("ops"))
        .include_folder(kernels.join("include"))
        .source(REDUCE);
    gemm.into_iter().chain([reduce]).collect()
}

/// Loads `kernels` in one batch, as a program starts, on a compile-only
/// sm_90 target over `store`: the loader's totals and each kernel's
/// outcome in the batch.
fn program_loads(
    store: Arc<dyn ArtifactStore>,
    kernels: &[CudaKernel],
) -> (LoaderStatistics, Vec<KernelOutcome>) {
    let target = CudaTarget::compile_only(Architecture::new(9, 0))
        .expect("NVRTC, which kiln warm used")
        .with_store(store);
    let variant = target.variant();
    let config = LoaderConfig {
        // The batch alone: no warm-start profile loads ahead of it or is
        // written after it.
        profile: false,
        ..LoaderConfig::default()
    };
    let mut loader = KernelLoader::with_config(target, config);
    for kernel in kernels {
        loader.enqueue(Box::new(kernel.clone()), variant);
    }
    for kernel in kernels {
        let id = ArtifactId::new(kernel.id(), variant);
        loader
            .load(kernel, &id)
            .unwrap_or_else(|error| panic!("{} loads: {error}", kernel.id()));
    }
    let outcomes = loader
        .records()
        .iter()
        .flat_map(|batch| batch.records.iter().map(|record| record.outcome))
        .collect();
    (loader.statistics(), outcomes)
}

// L11
#[test]
fn l11_a_program_after_kiln_warm_finds_every_module_by_its_id() {
    let scratch = Scratch::new("warm-ids");
    let kernels = kernel_folder(&scratch);
    let root = scratch.join("store");
    let run = finish(
        kiln(&root, &["--json", "warm", "--cuda-arch", "sm_90"])
            .arg(&kernels)
            .current_dir(scratch.path()),
    );
    let Some(row) = cuda_row(&run.json(), "L11 kiln warm then a program") else {
        return;
    };
    assert_eq!(
        (row["compiled"].as_u64(), row["failed"].as_u64()),
        (Some(3), Some(0)),
        "kiln warm compiles the three modules: {row:#}"
    );

    let store: Arc<dyn ArtifactStore> =
        Arc::new(DiskStore::open(StoreConfig::at(&root)).expect("the store opens"));
    let program = program_kernels(&kernels);
    let (statistics, outcomes) = program_loads(Arc::clone(&store), &program);
    assert_eq!(
        outcomes,
        [KernelOutcome::FromStore; 3],
        "every module is found under the program's own id"
    );
    assert_eq!(
        (
            statistics.hits,
            statistics.misses,
            statistics.compiled,
            statistics.rekeyed,
            statistics.stored
        ),
        (3, 0, 0, 0, 0),
        "no miss: nothing lowered, looked up by its text, rekeyed or stored: {statistics:?}"
    );
    let counts = store.statistics();
    assert_eq!(
        (counts.hits, counts.absent, counts.puts),
        (3, 0, 0),
        "the store answered three lookups by id and took no write: {counts:?}"
    );

    // What makes the ids agree: a program naming its kernels itself asks
    // for other ids, and takes kiln warm's artifacts by their text only.
    let named: Vec<CudaKernel> = program
        .iter()
        .enumerate()
        .map(|(index, kernel)| {
            let mut builder = CudaKernel::builder(
                kiln_engine::KernelId::named("program.own").parameter(&index),
                kernel.entry().clone(),
            )
            .program_name(kernel.program_name())
            .options(kernel.options().clone())
            .source_folder(if index == 2 {
                kernels.join("ops")
            } else {
                kernels.clone()
            })
            .include_folder(kernels.join("include"));
            for entry in kernel.entries().skip(1) {
                builder = builder.entry(entry.clone());
            }
            builder.source(if index == 2 { REDUCE } else { GEMM })
        })
        .collect();
    let (statistics, _) = program_loads(store, &named);
    assert_eq!(
        (statistics.hits, statistics.compiled, statistics.rekeyed),
        (0, 0, 3),
        "{statistics:?}"
    );
}
