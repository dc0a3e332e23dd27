// kiln entry: main
// kiln specialize: RADIUS=1
// kiln specialize: RADIUS=2
// kiln specialize: RADIUS=4
//
// 1D convolution with a (2 RADIUS + 1)-tap filter, zero outside the input:
// out[i] = sum over t of weights[t] * input[i + t - RADIUS].

override RADIUS: u32 = 1;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read> weights: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let n = arrayLength(&input);
    let i = id.x;
    if i >= n {
        return;
    }
    var total = 0.0;
    for (var t = 0u; t <= 2u * RADIUS; t++) {
        let at = i32(i) + i32(t) - i32(RADIUS);
        if at >= 0 && at < i32(n) {
            total += weights[t] * input[u32(at)];
        }
    }
    output[i] = total;
}
