// kiln entry: matmul_tiled
// kiln specialize: TILE=8 UNROLL=1
// kiln specialize: TILE=8 UNROLL=2
// kiln specialize: TILE=8 UNROLL=3
// kiln specialize: TILE=8 UNROLL=4
// kiln specialize: TILE=8 UNROLL=5
// kiln specialize: TILE=8 UNROLL=6
// kiln specialize: TILE=8 UNROLL=7
// kiln specialize: TILE=8 UNROLL=8
// kiln specialize: TILE=8 UNROLL=9
// kiln specialize: TILE=8 UNROLL=10
// kiln specialize: TILE=8 UNROLL=11
// kiln specialize: TILE=8 UNROLL=12
// kiln specialize: TILE=8 UNROLL=13
// kiln specialize: TILE=8 UNROLL=14
// kiln specialize: TILE=8 UNROLL=15
// kiln specialize: TILE=8 UNROLL=16
// kiln specialize: TILE=8 UNROLL=17
// kiln specialize: TILE=8 UNROLL=18
// kiln specialize: TILE=8 UNROLL=19
// kiln specialize: TILE=8 UNROLL=20
// kiln specialize: TILE=8 UNROLL=21
// kiln specialize: TILE=8 UNROLL=22
// kiln specialize: TILE=16 UNROLL=1
// kiln specialize: TILE=16 UNROLL=2
// kiln specialize: TILE=16 UNROLL=3
// kiln specialize: TILE=16 UNROLL=4
// kiln specialize: TILE=16 UNROLL=5
// kiln specialize: TILE=16 UNROLL=6
// kiln specialize: TILE=16 UNROLL=7
// kiln specialize: TILE=16 UNROLL=8
// kiln specialize: TILE=16 UNROLL=9
// kiln specialize: TILE=16 UNROLL=10
// kiln specialize: TILE=16 UNROLL=11
// kiln specialize: TILE=16 UNROLL=12
// kiln specialize: TILE=16 UNROLL=13
// kiln specialize: TILE=16 UNROLL=14
// kiln specialize: TILE=16 UNROLL=15
// kiln specialize: TILE=16 UNROLL=16
// kiln specialize: TILE=16 UNROLL=17
// kiln specialize: TILE=16 UNROLL=18
// kiln specialize: TILE=16 UNROLL=19
// kiln specialize: TILE=16 UNROLL=20
// kiln specialize: TILE=16 UNROLL=21
// kiln specialize: TILE=16 UNROLL=22
// kiln specialize: TILE=32 UNROLL=1
// kiln specialize: TILE=32 UNROLL=2
// kiln specialize: TILE=32 UNROLL=3
// kiln specialize: TILE=32 UNROLL=4
// kiln specialize: TILE=32 UNROLL=5
// kiln specialize: TILE=32 UNROLL=6
// kiln specialize: TILE=32 UNROLL=7
// kiln specialize: TILE=32 UNROLL=8
// kiln specialize: TILE=32 UNROLL=9
// kiln specialize: TILE=32 UNROLL=10
// kiln specialize: TILE=32 UNROLL=11
// kiln specialize: TILE=32 UNROLL=12
// kiln specialize: TILE=32 UNROLL=13
// kiln specialize: TILE=32 UNROLL=14
// kiln specialize: TILE=32 UNROLL=15
// kiln specialize: TILE=32 UNROLL=16
// kiln specialize: TILE=32 UNROLL=17
// kiln specialize: TILE=32 UNROLL=18
// kiln specialize: TILE=32 UNROLL=19
// kiln specialize: TILE=32 UNROLL=20

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
