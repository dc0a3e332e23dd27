// A kernel both CUDA and HIP compile: the header sends it to hipRTC too.
//
// kiln entry: axpy
// kiln backends: cuda hip
// kiln specialize: UNROLL=1
// kiln specialize: UNROLL=4

#include "portable.h"

extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int first = (blockIdx.x * blockDim.x + threadIdx.x) * UNROLL;
    for (int step = 0; step < UNROLL; ++step) {
        int i = first + step;
        if (i < n) y[i] = fused(a, x[i], y[i]);
    }
}
