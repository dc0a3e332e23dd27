// kiln entry: main
// kiln specialize: BINS=16
// kiln specialize: BINS=64
//
// Histogram of values in [0, 1) into BINS bins: each workgroup counts into
// workgroup memory with atomics, then adds its counts to the global bins.
// BINS is at most 256.

override BINS: u32 = 16;

@group(0) @binding(0) var<storage, read> input: array<f32>;
@group(0) @binding(1) var<storage, read_write> bins: array<atomic<u32>>;

var<workgroup> local_bins: array<atomic<u32>, 256>;

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) id: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    for (var b = local; b < BINS; b += 64u) {
        atomicStore(&local_bins[b], 0u);
    }
    workgroupBarrier();
    if id.x < arrayLength(&input) {
        let value = clamp(input[id.x], 0.0, 0.99999994);
        atomicAdd(&local_bins[u32(value * f32(BINS))], 1u);
    }
    workgroupBarrier();
    for (var b = local; b < BINS; b += 64u) {
        atomicAdd(&bins[b], atomicLoad(&local_bins[b]));
    }
}
