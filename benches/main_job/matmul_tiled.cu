
#ifndef TILE
#define TILE 16
#endif
extern "C" __global__ void matmul_tiled(const float* a, const float* b, float* c,
                                        unsigned m, unsigned n, unsigned k) {
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE];
    unsigned row = blockIdx.y * TILE + threadIdx.y;
    unsigned column = blockIdx.x * TILE + threadIdx.x;
    float total = 0.0f;
    for (unsigned t = 0; t < (k + TILE - 1) / TILE; ++t) {
        unsigned a_column = t * TILE + threadIdx.x;
        unsigned b_row = t * TILE + threadIdx.y;
        a_tile[threadIdx.y][threadIdx.x] = (row < m && a_column < k) ? a[row * k + a_column] : 0.0f;
        b_tile[threadIdx.y][threadIdx.x] = (b_row < k && column < n) ? b[b_row * n + column] : 0.0f;
        __syncthreads();
#pragma unroll UNROLL
        for (unsigned i = 0; i < TILE; ++i) total += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && column < n) c[row * n + column] = total;
}
