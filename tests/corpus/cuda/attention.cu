/*
 * Copyright the kiln authors.
 * SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * A forward and a backward pass of a softmax over rows, in one file, for
 * two head sizes, with the toolkit's half type for the output.
 */

// kiln entry: softmax_forward softmax_backward
// kiln specialize: HEAD=64
// kiln specialize: HEAD=128
// kiln include: ../include
// kiln options: --use_fast_math -std=c++17

#include <cuda_fp16.h>
#include "common.cuh"
#include <tiles.h>

extern "C" __global__ void softmax_forward(__half* out, const float* in, int rows) {
    int row = blockIdx.x;
    if (row >= rows) return;
    float largest = -1e30f;
    for (int column = threadIdx.x; column < HEAD; column += blockDim.x) {
        largest = fmaxf(largest, in[row * HEAD + column]);
    }
    for (int column = threadIdx.x; column < HEAD; column += blockDim.x) {
        float value = scaled_exp(in[row * HEAD + column] - largest, 1.0f);
        out[row * HEAD + column] = __float2half(value);
    }
}

extern "C" __global__ void softmax_backward(float* grad, const float* out, int rows) {
    int row = blockIdx.x;
    if (row >= rows) return;
    for (int column = threadIdx.x; column < HEAD; column += blockDim.x) {
        int at = row * HEAD + column;
        grad[at] = out[at] * (1.0f - out[at]) + (float)tile_index(0, 0);
    }
}
