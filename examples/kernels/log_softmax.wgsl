// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=256
//
// Row-wise log-softmax, one workgroup per row: x - max - log(sum(exp(x - max))).

override WORKGROUP: u32 = 64;

struct Shape {
    rows: u32,
    columns: u32,
}

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read_write> output: array<f32>;

var<workgroup> scratch: array<f32, 256>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let start = group.x * shape.columns;
    var found = -3.0e38;
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        found = max(found, input[start + j]);
    }
    scratch[local] = found;
    workgroupBarrier();
    for (var width = WORKGROUP / 2u; width > 0u; width /= 2u) {
        if local < width {
            scratch[local] = max(scratch[local], scratch[local + width]);
        }
        workgroupBarrier();
    }
    let row_max = scratch[0];
    workgroupBarrier();
    var total = 0.0;
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        total += exp(input[start + j] - row_max);
    }
    scratch[local] = total;
    workgroupBarrier();
    for (var width = WORKGROUP / 2u; width > 0u; width /= 2u) {
        if local < width {
            scratch[local] += scratch[local + width];
        }
        workgroupBarrier();
    }
    let log_sum = log(scratch[0]);
    for (var j = local; j < shape.columns; j += WORKGROUP) {
        output[start + j] = input[start + j] - row_max - log_sum;
    }
}
