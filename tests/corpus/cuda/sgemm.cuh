/*
 * SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * Matrix products in the shape nvcc projects give theirs: a `.cuh` of
 * several kernels and templates that includes the C++ standard library
 * for its integers, limits, printf, assert and min/max, and cuBLAS for
 * the host code that checks it (left out of a run-time compile).
 */

// kiln entry: sgemm_naive sgemm_tiled<16> sgemm_tiled<32> scale_rows<float>
// kiln define: ALPHA=1.0f
// kiln specialize: BETA=0.0f
// kiln specialize: BETA=1.0f
// kiln backends: cuda

#include <cstdio>
#include <cstdint>
#include <climits>
#include <cfloat>
#include <cmath>
#include <cassert>
#include <algorithm>
#include <type_traits>
#include <utility>
#ifndef __CUDACC_RTC__
#include <cublas_v2.h>
#include <iostream>
#endif

extern "C" __global__ void sgemm_naive(int m, int n, int k, const float* a, const float* b,
                                       float* c) {
    const uint32_t row = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t col = blockIdx.y * blockDim.y + threadIdx.y;
    assert(m <= INT_MAX);
    if (row < static_cast<uint32_t>(m) && col < static_cast<uint32_t>(n)) {
        float sum = 0.0f;
        for (int i = 0; i < k; ++i) sum += a[row * k + i] * b[i * n + col];
        c[row * n + col] = ALPHA * sum + BETA * c[row * n + col];
    }
    if (row == 0 && col == 0 && k < 0) printf("k=%d\n", k);
}

template <int TILE>
__global__ void sgemm_tiled(int m, int n, int k, const float* a, const float* b, float* c) {
    static_assert(std::is_integral<decltype(TILE)>::value, "a tile is a count");
    __shared__ float as[TILE * TILE];
    __shared__ float bs[TILE * TILE];
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int tile = 0; tile < k; tile += TILE) {
        as[threadIdx.y * TILE + threadIdx.x] = a[row * k + tile + threadIdx.x];
        bs[threadIdx.y * TILE + threadIdx.x] = b[(tile + threadIdx.y) * n + col];
        __syncthreads();
        for (int i = 0; i < std::min(TILE, k - tile); ++i)
            sum += as[threadIdx.y * TILE + i] * bs[i * TILE + threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = ALPHA * sum + BETA * c[row * n + col];
}

template <typename T>
__global__ void scale_rows(T* x, int n, T by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    T clamped = std::max(std::move(by), static_cast<T>(-FLT_MAX));
    if (i < n) x[i] = static_cast<T>(std::fabs(x[i])) * clamped;
}
