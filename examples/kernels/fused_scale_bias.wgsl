// kiln entry: main
// kiln specialize: SCALE=0.5 BIAS=1.0
// kiln specialize: SCALE=2.0 BIAS=0.0
// kiln specialize: SCALE=-1.0 BIAS=0.25
//
// out[i] = SCALE * a[i] * b[i] + BIAS: a fused elementwise op whose
// coefficients are baked into the pipeline.

override SCALE: f32 = 1.0;
override BIAS: f32 = 0.0;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(128)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&output) {
        output[i] = SCALE * a[i] * b[i] + BIAS;
    }
}
