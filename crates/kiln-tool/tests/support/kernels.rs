//! Kernel files the tests write into the folders `kiln warm` walks: CUDA
//! and HIP kernels of one entry, a file of two specializations, a kernel
//! that takes the compiler a second or more, and folders of WGSL kernels.

use std::path::{Path, PathBuf};

use super::wgsl_kernel;

/// A C++ kernel file of one entry, `entry`, taking `float* x` and running
/// `body`: a CUDA kernel as `.cu`, a HIP one as `.hip` or `.cu`.
pub fn cxx_kernel(entry: &str, body: &str) -> String {
    format!("// kiln entry: {entry}\nextern \"C\" __global__ void {entry}(float* x) {{ {body} }}\n")
}

/// `scale`, which doubles its input: a kernel every compiler compiles.
pub fn scale_kernel() -> String {
    cxx_kernel("scale", "x[threadIdx.x] *= 2.0f;")
}

/// `scale` with two specializations: two kernels of one file.
pub const TWO_SPECIALIZATIONS: &str = "// kiln entry: scale\n// kiln specialize: SCALE_BY=2\n// kiln specialize: SCALE_BY=3\n\
     extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= SCALE_BY; }\n";

/// `slow`, a C++ kernel that takes NVRTC or hipRTC a second or more.
pub fn slow_kernel() -> String {
    let mut text = String::from("// kiln entry: slow\n");
    let mut sum = Vec::new();
    for number in 0..40 {
        text.push_str(&format!(
            "__device__ float f{number}(float x) {{ for (int i = 0; i < {}; ++i) x = x * \
             {number}.5f + sinf(x); return x; }}\n",
            number % 7 + 2
        ));
        sum.push(format!("f{number}(v)"));
    }
    text.push_str(&format!(
        "extern \"C\" __global__ void slow(float* x) {{ float v = x[threadIdx.x]; \
         x[threadIdx.x] = {}; }}\n",
        sum.join(" + ")
    ));
    text
}

/// Writes `text` as the kernel file `name` of `folder`.
pub fn write_kernel(folder: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = folder.join(name);
    std::fs::write(&path, text).expect("a kernel file");
    path
}

/// Writes `count` WGSL kernels, `k0.wgsl` on, each writing its number.
pub fn wgsl_kernels(folder: &Path, count: u32) {
    for value in 0..count {
        write_kernel(folder, &format!("k{value}.wgsl"), wgsl_kernel(value));
    }
}
