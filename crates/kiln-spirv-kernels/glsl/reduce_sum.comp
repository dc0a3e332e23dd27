#version 450
// One partial sum per workgroup: each invocation adds a grid-strided slice
// of the input, then the workgroup adds its 128 sums in shared memory.

layout(local_size_x = 128) in;

layout(set = 0, binding = 0) uniform Params {
    uint n;
};
layout(set = 0, binding = 1) readonly buffer Input {
    float values[];
};
layout(set = 0, binding = 2) buffer Partials {
    float partials[];
};

shared float sums[128];

void main() {
    uint local = gl_LocalInvocationID.x;
    uint stride = gl_NumWorkGroups.x * 128u;
    float sum = 0.0;
    for (uint i = gl_GlobalInvocationID.x; i < n; i += stride) {
        sum += values[i];
    }
    sums[local] = sum;
    barrier();
    for (uint half_size = 64u; half_size > 0u; half_size /= 2u) {
        if (local < half_size) {
            sums[local] += sums[local + half_size];
        }
        barrier();
    }
    if (local == 0u) {
        partials[gl_WorkGroupID.x] = sums[0];
    }
}
