/* SPDX-License-Identifier: MIT OR Apache-2.0 */

// Convolutions in the shape ROCm's own examples give theirs: quoted
// includes of hipRTC's headers and a sibling, template arguments of
// size_t, long, unsigned char and enum type written as C++ writes them.
//
// kiln entry: convolution<5> convolution<9> window<3, 2, 1> blend<Mode::Fast>

#include "hip/hip_runtime.h"
#include <hip/hip_fp16.h>
#include "conv_common.h"

enum class Mode : int { Slow = 0, Fast = 1 };

template <size_t K>
__global__ void convolution(const float* x, float* y, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.0f;
    for (size_t k = 0; k < K; ++k) sum += tap(x, i + (long)k - (long)(K / 2), n);
    if (i < n) y[i] = sum / K;
}

template <long RADIUS, unsigned char STRIDE, short SHIFT>
__global__ void window(const float* x, float* y, long n) {
    long i = (blockIdx.x * blockDim.x + threadIdx.x) * STRIDE;
    if (i < n) y[i] = tap(x, i - RADIUS, n) + tap(x, i + RADIUS + SHIFT, n);
}

template <Mode M>
__global__ void blend(float* y, long n) {
    long i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = M == Mode::Fast ? y[i] * 2.0f : y[i];
}
