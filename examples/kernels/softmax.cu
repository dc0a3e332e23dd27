// kiln entry: softmax
// kiln specialize: BLOCK=128
// kiln specialize: BLOCK=256
//
// Row-wise softmax, one block per row, as softmax.wgsl.

#ifndef BLOCK
#define BLOCK 256
#endif

extern "C" __global__ void softmax(const float* input, float* output, unsigned columns) {
    __shared__ float scratch[BLOCK];
    unsigned local = threadIdx.x;
    const float* row_in = input + blockIdx.x * columns;
    float* row_out = output + blockIdx.x * columns;
    float found = -3.0e38f;
    for (unsigned j = local; j < columns; j += BLOCK) found = fmaxf(found, row_in[j]);
    scratch[local] = found;
    __syncthreads();
    for (unsigned width = BLOCK / 2; width > 0; width /= 2) {
        if (local < width) scratch[local] = fmaxf(scratch[local], scratch[local + width]);
        __syncthreads();
    }
    float row_max = scratch[0];
    __syncthreads();
    float total = 0.0f;
    for (unsigned j = local; j < columns; j += BLOCK) total += expf(row_in[j] - row_max);
    scratch[local] = total;
    __syncthreads();
    for (unsigned width = BLOCK / 2; width > 0; width /= 2) {
        if (local < width) scratch[local] += scratch[local + width];
        __syncthreads();
    }
    float row_sum = scratch[0];
    for (unsigned j = local; j < columns; j += BLOCK) row_out[j] = expf(row_in[j] - row_max) / row_sum;
}
