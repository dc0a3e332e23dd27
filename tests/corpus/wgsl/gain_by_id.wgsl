// An override known by its number, as generated shaders declare them.
// kiln specialize: 1300=1.5

@id(1300) override gain: f32 = 1.0;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * gain;
}
