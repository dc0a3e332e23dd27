// kiln entry: main
// kiln specialize: WORKGROUP=64 LEAK=0.0
// kiln specialize: WORKGROUP=256 LEAK=0.0
// kiln specialize: WORKGROUP=256 LEAK=0.01
//
// Leaky ReLU in place: x = x > 0 ? x : LEAK * x.

override WORKGROUP: u32 = 64;
override LEAK: f32 = 0.0;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i < arrayLength(&data) {
        let v = data[i];
        data[i] = select(LEAK * v, v, v > 0.0);
    }
}
