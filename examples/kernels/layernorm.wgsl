// kiln entry: main
// kiln specialize: WORKGROUP=64 EPSILON=0.00001
// kiln specialize: WORKGROUP=128 EPSILON=0.00001
//
// Layer normalization of each row (one workgroup per row): subtract the
// row's mean, divide by sqrt(variance + EPSILON).

override WORKGROUP: u32 = 64;
override EPSILON: f32 = 0.00001;

struct Shape {
    rows: u32,
    columns: u32,
}

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

var<workgroup> scratch: array<f32, 256>;

fn workgroup_sum(local: u32, value: f32) -> f32 {
    scratch[local] = value;
    workgroupBarrier();
    for (var width = WORKGROUP / 2u; width > 0u; width /= 2u) {
        if local < width {
            scratch[local] += scratch[local + width];
        }
        workgroupBarrier();
    }
    let total = scratch[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let start = group.x * shape.columns;
    var total = 0.0;
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        total += input[start + j];
    }
    let mean = workgroup_sum(local, total) / f32(shape.columns);
    var squares = 0.0;
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        let centered = input[start + j] - mean;
        squares += centered * centered;
    }
    let variance = workgroup_sum(local, squares) / f32(shape.columns);
    let scale = inverseSqrt(variance + EPSILON);
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        output[start + j] = (input[start + j] - mean) * scale;
    }
}
