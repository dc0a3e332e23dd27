/*
 * Copyright the kiln authors.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 */

// Two passes of one pipeline in one module: every @compute entry is a
// kernel, the vertex stage is not.
// kiln specialize: SCALE=2.0
// kiln specialize: SCALE=0.5

override SCALE: f32 = 1.0;

@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(64)
fn scale_pass(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = data[id.x] * SCALE;
}

@compute @workgroup_size(64)
fn clamp_pass(@builtin(global_invocation_id) id: vec3<u32>) {
    data[id.x] = clamp(data[id.x], 0.0, SCALE);
}

@vertex
fn unused_vertex() -> @builtin(position) vec4<f32> {
    return vec4<f32>(0.0, 0.0, 0.0, 1.0);
}
