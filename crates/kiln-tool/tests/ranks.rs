//! Keys are rank-agnostic (P1, P10): processes that choose different
//! devices of one architecture, as the ranks of a training job do with
//! `CUDA_VISIBLE_DEVICES`, share every entry of one store, and compile each
//! kernel once between them (P4).

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use kiln_engine::conformance::skip;
use serde_json::Value;
use support::{Scratch, kiln};

const RANKS: usize = 8;

#[test]
fn ranks_on_different_devices_share_every_entry_and_compile_each_kernel_once() {
    if let Err(reason) = kiln_cuda::CudaCompiler::new() {
        skip(
            "ranks_on_different_devices_share_every_entry_and_compile_each_kernel_once",
            &reason.to_string(),
        );
        return;
    }
    let scratch = Scratch::new("ranks");
    let store = scratch.join("store");
    let folder = scratch.folder("kernels");
    std::fs::write(
        folder.join("scale.cu"),
        "// kiln entry: scale\n\
         // kiln specialize: SCALE_BY=2\n// kiln specialize: SCALE_BY=3\n\
         // kiln specialize: SCALE_BY=4\n// kiln specialize: SCALE_BY=5\n\
         extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= SCALE_BY; }\n",
    )
    .expect("a kernel file");
    // Every rank at once, each seeing another device (on a machine without
    // them, each compiles for sm_90 alone: the keys must not tell the
    // ranks apart either way).
    let ranks: Vec<_> = (0..RANKS)
        .map(|rank| {
            kiln(
                &store,
                &[
                    "--json",
                    "warm",
                    "--backend",
                    "cuda",
                    "--cuda-arch",
                    "sm_90",
                ],
            )
            .arg(&folder)
            .env("CUDA_VISIBLE_DEVICES", rank.to_string())
            .env("KILN_PARALLELISM", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a rank starts")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut compiled = 0;
    for rank in ranks {
        let output = rank.wait_with_output().expect("a rank ends");
        assert!(
            Instant::now() < deadline,
            "the ranks ran past their deadline"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_str(&stdout).expect("a JSON report");
        let row = &report["backends"][0];
        let count = |name: &str| row[name].as_u64().unwrap_or(0);
        assert_eq!(
            count("compiled") + count("from_store") + count("rekeyed"),
            4,
            "every kernel loads in every rank: {row:#}"
        );
        compiled += count("compiled");
    }
    assert_eq!(
        compiled, 4,
        "each kernel is compiled once across the {RANKS} ranks"
    );
}
