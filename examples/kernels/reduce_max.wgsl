// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=256
//
// One partial maximum per workgroup, as reduce_sum does sums.

override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;

var<workgroup> best: array<f32, 256>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let n = arrayLength(&input);
    let stride = WORKGROUP * groups.x;
    var found = -3.0e38;
    for (var i = group.x * WORKGROUP + local; i < n; i += stride) {
        found = max(found, input[i]);
    }
    best[local] = found;
    workgroupBarrier();
    for (var width = WORKGROUP / 2u; width > 0u; width /= 2u) {
        if local < width {
            best[local] = max(best[local], best[local + width]);
        }
        workgroupBarrier();
    }
    if local == 0u {
        partials[group.x] = best[0];
    }
}
