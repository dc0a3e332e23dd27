// kiln entry: main
// kiln specialize: WORKGROUP=64
// kiln specialize: WORKGROUP=128
//
// Exclusive prefix sum within each block of 2 * WORKGROUP elements
// (Blelloch: an up-sweep builds partial sums as a tree, a down-sweep
// spreads them back), each invocation holding two elements.

override WORKGROUP: u32 = 64;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> output: array<f32>;

var<workgroup> tree: array<f32, 512>;

@compute @workgroup_size(WORKGROUP)
fn main(
    @builtin(local_invocation_index) local: u32,
    @builtin(workgroup_id) group: vec3<u32>,
) {
    let n = arrayLength(&input);
    let block = 2u * WORKGROUP;
    let base = group.x * block;
    for (var k = 0u; k < 2u; k++) {
        let i = base + 2u * local + k;
        tree[2u * local + k] = select(0.0, input[min(i, n - 1u)], i < n);
    }
    var offset = 1u;
    for (var width = WORKGROUP; width > 0u; width /= 2u) {
        workgroupBarrier();
        if local < width {
            let left = offset * (2u * local + 1u) - 1u;
            let right = offset * (2u * local + 2u) - 1u;
            tree[right] += tree[left];
        }
        offset *= 2u;
    }
    if local == 0u {
        tree[block - 1u] = 0.0;
    }
    for (var width = 1u; width < block; width *= 2u) {
        offset /= 2u;
        workgroupBarrier();
        if local < width {
            let left = offset * (2u * local + 1u) - 1u;
            let right = offset * (2u * local + 2u) - 1u;
            let carried = tree[left];
            tree[left] = tree[right];
            tree[right] += carried;
        }
    }
    workgroupBarrier();
    for (var k = 0u; k < 2u; k++) {
        let i = base + 2u * local + k;
        if i < n {
            output[i] = tree[2u * local + k];
        }
    }
}
