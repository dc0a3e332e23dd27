//! `kiln warm` reads its kernels from the store while the device's context
//! is made (F5, F11): when the architecture is known before the device
//! (asked for with `--cuda-arch`, or said by the driver), a thread makes
//! the kernels and asks the store for every one beside the context, and
//! the batch takes those answers from memory. Real NVRTC, compile-only for
//! sm_90 (the context is the one of a machine without a GPU), through the
//! real binary, its debug lines read.

mod support;

use std::path::PathBuf;

use support::{Finished, Scratch, cuda_row, finish, kiln, kiln_lines};

/// A kernel file as a project ships one: a license comment, two entries
/// (one a template), three specializations, a sibling header and a
/// toolkit one.
const SCAN: &str = r#"// Copyright 2026 The Scan Authors.
// SPDX-License-Identifier: Apache-2.0
//
// kiln entry: block_scan<256> clear
// kiln specialize: WARPS=4
// kiln specialize: WARPS=8
// kiln specialize: WARPS=16
#include <cstdint>
#include "warp.h"

template <int B>
__global__ void block_scan(const float* in, float* out, int n) {
    __shared__ float part[WARPS];
    int i = blockIdx.x * B + threadIdx.x;
    float x = i < n ? in[i] : 0.0f;
    x = warp_sum(x);
    if (threadIdx.x % 32 == 0) part[(threadIdx.x / 32) % WARPS] = x;
    __syncthreads();
    if (i < n) out[i] = part[0] + x;
}

extern "C" __global__ void clear(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}
"#;

/// The sibling header.
const WARP: &str = r#"#pragma once
__device__ inline float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_down_sync(0xffffffffu, x, offset);
    return x;
}
"#;

fn kernel_folder(scratch: &Scratch) -> PathBuf {
    let kernels = scratch.folder("kernels");
    std::fs::write(kernels.join("scan.cu"), SCAN).expect("a kernel file");
    std::fs::write(kernels.join("warp.h"), WARP).expect("a header");
    kernels
}

/// `kiln -vv --json warm --backend cuda ARGUMENTS... FOLDER`, finished.
fn warm(scratch: &Scratch, folder: &PathBuf, arguments: &[&str], mode: Option<&str>) -> Finished {
    let mut command = kiln(
        &scratch.join("store"),
        &["-vv", "--json", "warm", "--backend", "cuda"],
    );
    command.args(arguments).arg(folder);
    match mode {
        Some(mode) => command.env("KILN_MODE", mode),
        None => command.env_remove("KILN_MODE"),
    };
    finish(&mut command)
}

/// The debug line that says how many kernels were read ahead, if any.
fn read_ahead(run: &Finished) -> Option<String> {
    kiln_lines(&run.stderr)
        .into_iter()
        .find(|line| line.contains("read ahead of the device"))
        .map(str::to_owned)
}

// F11, F5
#[test]
fn f11_kiln_warm_reads_the_store_beside_the_device_and_the_batch_takes_it() {
    let scratch = Scratch::new("warm-ahead");
    let folder = kernel_folder(&scratch);
    let cold = warm(&scratch, &folder, &["--cuda-arch", "sm_90"], None);
    let Some(row) = cuda_row(&cold.json(), "F11 kiln warm reads ahead") else {
        return;
    };
    assert_eq!(
        (row["compiled"].as_u64(), row["failed"].as_u64()),
        (Some(3), Some(0)),
        "{row:#}\n{}",
        cold.stderr
    );
    let said = read_ahead(&cold).expect("the cold run read ahead");
    assert!(said.contains("0 of 3 kernels"), "{said}");

    let again = warm(&scratch, &folder, &["--cuda-arch", "sm_90"], None);
    let row = cuda_row(&again.json(), "F11 kiln warm reads ahead").expect("NVRTC is here");
    assert_eq!(
        (row["from_store"].as_u64(), row["compiled"].as_u64()),
        (Some(3), Some(0)),
        "{row:#}"
    );
    let said = read_ahead(&again).expect("the warm run read ahead");
    assert!(said.contains("3 of 3 kernels"), "{said}");
    assert!(
        kiln_lines(&again.stderr)
            .iter()
            .any(|line| line.contains("0 kernels read ahead were not asked for")),
        "the batch took every answer read ahead:\n{}",
        again.stderr
    );
}

// F11: a compile-only mode's architecture is the mode's, not the device's:
// nothing is read ahead for a device it will not use.
#[test]
fn f11_kiln_warm_in_compile_only_mode_reads_nothing_ahead() {
    let scratch = Scratch::new("warm-ahead-mode");
    let folder = kernel_folder(&scratch);
    let run = warm(
        &scratch,
        &folder,
        &["--cuda-arch", "sm_90"],
        Some("compile-only"),
    );
    let Some(row) = cuda_row(&run.json(), "F11 compile-only mode reads nothing ahead") else {
        return;
    };
    assert_eq!(row["compiled"].as_u64(), Some(3), "{row:#}");
    assert_eq!(read_ahead(&run), None, "{}", run.stderr);
}
