// kiln entry: transpose
// kiln specialize: TILE=16
// kiln specialize: TILE=32
//
// Transpose through a padded shared-memory tile, as transpose.wgsl.

#ifndef TILE
#define TILE 32
#endif

extern "C" __global__ void transpose(const float* input, float* output, unsigned rows, unsigned columns) {
    __shared__ float tile[TILE][TILE + 1];
    unsigned column = blockIdx.x * TILE + threadIdx.x;
    unsigned row = blockIdx.y * TILE + threadIdx.y;
    if (row < rows && column < columns) tile[threadIdx.y][threadIdx.x] = input[row * columns + column];
    __syncthreads();
    unsigned out_column = blockIdx.y * TILE + threadIdx.x;
    unsigned out_row = blockIdx.x * TILE + threadIdx.y;
    if (out_row < columns && out_column < rows) output[out_row * rows + out_column] = tile[threadIdx.x][threadIdx.y];
}
