// Block reductions for float and double, with cooperative groups and a lane
// id read through inline PTX: CUDA only, so the header names no HIP backend.
//
// kiln entry: block_reduce<float, 128> block_reduce<double, 128>
// kiln entry: lane_ids

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

template <typename T, int BLOCK>
__global__ void block_reduce(T* out, const T* in) {
    __shared__ T partial[BLOCK];
    cg::thread_block block = cg::this_thread_block();
    partial[threadIdx.x] = in[blockIdx.x * BLOCK + threadIdx.x];
    block.sync();
    for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        block.sync();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

extern "C" __global__ void lane_ids(unsigned* out) {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    out[blockIdx.x * blockDim.x + threadIdx.x] = lane;
}
