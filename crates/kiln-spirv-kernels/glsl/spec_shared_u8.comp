// A shader in the shape of ggml's Vulkan kernels that naga's SPIR-V front
// end cannot read: 8-bit storage and a shared array sized by a
// specialization constant. Each workgroup of 64 sums BLOCK bytes, each
// times SCALE, into sums[workgroup]; BLOCK is at most 64.
#version 450
#extension GL_EXT_shader_8bit_storage : require

layout(local_size_x = 64) in;

layout(constant_id = 0) const uint BLOCK = 64;
layout(constant_id = 1) const uint SCALE = 1;

layout(std430, set = 0, binding = 0) readonly buffer Bytes { uint8_t bytes[]; };
layout(std430, set = 0, binding = 1) buffer Sums { uint sums[]; };

shared uint tile[BLOCK];

void main() {
    uint local = gl_LocalInvocationID.x;
    if (local < BLOCK) {
        tile[local] = uint(bytes[gl_WorkGroupID.x * BLOCK + local]) * SCALE;
    }
    barrier();
    if (local == 0) {
        uint sum = 0;
        for (uint k = 0; k < BLOCK; ++k) {
            sum += tile[k];
        }
        sums[gl_WorkGroupID.x] = sum;
    }
}
