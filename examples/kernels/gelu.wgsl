// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=256
//
// GELU with the tanh approximation: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;

const SQRT_2_OVER_PI: f32 = 0.7978845608;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&output) {
        let x = input[i];
        let inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
        output[i] = 0.5 * x * (1.0 + tanh(inner));
    }
}
