/* SPDX-License-Identifier: MIT OR Apache-2.0 */

// An inclusive scan of one block, for two block sizes, and its tail fix-up.
//
// kiln entry: block_scan<64> block_scan<256>
// kiln entry: add_offsets
// kiln options: -O3

#include <hip/hip_runtime.h>
#include "../include/tiles.h"

template <int BLOCK>
__global__ void block_scan(float* data) {
    __shared__ float values[BLOCK];
    values[threadIdx.x] = data[blockIdx.x * BLOCK + threadIdx.x];
    __syncthreads();
    for (int offset = 1; offset < BLOCK; offset *= 2) {
        float add = threadIdx.x >= offset ? values[threadIdx.x - offset] : 0.0f;
        __syncthreads();
        values[threadIdx.x] += add;
        __syncthreads();
    }
    data[blockIdx.x * BLOCK + threadIdx.x] = values[threadIdx.x];
}

extern "C" __global__ void add_offsets(float* data, const float* offsets) {
    data[blockIdx.x * blockDim.x + threadIdx.x] += offsets[blockIdx.x] + tile_index(0, 0);
}
