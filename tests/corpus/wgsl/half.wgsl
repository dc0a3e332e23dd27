// Half precision: compiles where the device has SHADER_F16.
enable f16;

@group(0) @binding(0) var<storage, read_write> data: array<f16>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * 2.0h;
}
