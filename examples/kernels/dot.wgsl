// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=128
//
// Partial dot products of a and b, one per workgroup.

override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;

var<workgroup> sums: array<f32, 256>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let n = arrayLength(&a);
    let stride = WORKGROUP * groups.x;
    var total = 0.0;
    for (var i = group.x * WORKGROUP + local; i < n; i += stride) {
        total += a[i] * b[i];
    }
    sums[local] = total;
    workgroupBarrier();
    for (var width = WORKGROUP / 2u; width > 0u; width /= 2u) {
        if local < width {
            sums[local] += sums[local + width];
        }
        workgroupBarrier();
    }
    if local == 0u {
        partials[group.x] = sums[0];
    }
}
