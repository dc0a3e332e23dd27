// kiln entry: main
// kiln specialize: WORKGROUP_X=8 WORKGROUP_Y=8
// kiln specialize: WORKGROUP_X=16 WORKGROUP_Y=16
// kiln specialize: WORKGROUP_X=32 WORKGROUP_Y=4
//
// C = A B for row-major A (m x k) and B (k x n), one invocation per element
// of C.

override WORKGROUP_X: u32 = 8;
override WORKGROUP_Y: u32 = 8;

struct Dims {
    m: u32,
    n: u32,
    k: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

@compute @workgroup_size(WORKGROUP_X, WORKGROUP_Y)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let column = id.x;
    let row = id.y;
    if row >= dims.m || column >= dims.n {
        return;
    }
    var total = 0.0;
    for (var i = 0u; i < dims.k; i++) {
        total += a[row * dims.k + i] * b[i * dims.n + column];
    }
    c[row * dims.n + column] = total;
}
