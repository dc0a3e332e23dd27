// kiln entry: main
// kiln specialize: RADIUS=1 WORKGROUP=8
// kiln specialize: RADIUS=1 WORKGROUP=16
// kiln specialize: RADIUS=2 WORKGROUP=16
//
// 2D convolution of a row-major height x width image with a square
// (2 RADIUS + 1)^2 filter, zero outside the image.

override RADIUS: u32 = 1;
override WORKGROUP: u32 = 8;

struct Image {
    height: u32,
    width: u32,
}

@group(0) @binding(0) var<uniform> image: Image;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read_write> output: array<f32>;

@compute @workgroup_size(WORKGROUP, WORKGROUP)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let x = id.x;
    let y = id.y;
    if x >= image.width || y >= image.height {
        return;
    }
    let side = 2u * RADIUS + 1u;
    var total = 0.0;
    for (var dy = 0u; dy < side; dy++) {
        for (var dx = 0u; dx < side; dx++) {
            let sy = i32(y) + i32(dy) - i32(RADIUS);
            let sx = i32(x) + i32(dx) - i32(RADIUS);
            if sy >= 0 && sy < i32(image.height) && sx >= 0 && sx < i32(image.width) {
                total += weights[dy * side + dx] * input[u32(sy) * image.width + u32(sx)];
            }
        }
    }
    output[y * image.width + x] = total;
}
