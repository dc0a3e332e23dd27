// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=128
// kiln specialize: WORKGROUP=256
//
// Inclusive prefix sum within each block of WORKGROUP elements
// (Hillis-Steele, double-buffered in workgroup memory); the last element of
// each block goes to `block_sums`, for a second pass that adds the blocks'
// offsets.

override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;
@group(0) @binding(2) var<storage, read_write> block_sums: array<f32>;

var<workgroup> buffers: array<f32, 512>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let n = arrayLength(&input);
    let i = group.x * WORKGROUP + local;
    var value = 0.0;
    if i < n {
        value = input[i];
    }
    var from_half = 0u;
    buffers[local] = value;
    workgroupBarrier();
    for (var offset = 1u; offset < WORKGROUP; offset *= 2u) {
        let to_half = WORKGROUP - from_half;
        var sum = buffers[from_half + local];
        if local >= offset {
            sum += buffers[from_half + local - offset];
        }
        buffers[to_half + local] = sum;
        from_half = to_half;
        workgroupBarrier();
    }
    let scanned = buffers[from_half + local];
    if i < n {
        output[i] = scanned;
    }
    if local == WORKGROUP - 1u {
        block_sums[group.x] = scanned;
    }
}
