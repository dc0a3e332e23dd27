// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=128
// kiln specialize: WORKGROUP=256
//
// y[i] = a * x[i] + y[i], one invocation per element.

override WORKGROUP: u32 = 64;

struct Params {
    a: f32,
    n: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < params.n {
        y[i] = params.a * x[i] + y[i];
    }
}
