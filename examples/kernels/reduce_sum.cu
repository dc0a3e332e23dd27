// kiln entry: reduce_sum
// kiln specialize: BLOCK=128
// kiln specialize: BLOCK=256
//
// One partial sum per block, as reduce_sum.wgsl: strided loads, then a tree
// in shared memory. Launch with BLOCK threads per block.

#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void reduce_sum(const float* input, float* partials, unsigned n) {
    __shared__ float sums[BLOCK];
    unsigned local = threadIdx.x;
    float total = 0.0f;
    for (unsigned i = blockIdx.x * BLOCK + local; i < n; i += BLOCK * gridDim.x) {
        total += input[i];
    }
    sums[local] = total;
    __syncthreads();
    for (unsigned width = BLOCK / 2; width > 0; width /= 2) {
        if (local < width) sums[local] += sums[local + width];
        __syncthreads();
    }
    if (local == 0) partials[blockIdx.x] = sums[0];
}
