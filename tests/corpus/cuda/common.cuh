#ifndef CORPUS_COMMON_CUH
#define CORPUS_COMMON_CUH

// Helpers the attention kernels share with their file's siblings.
__device__ inline float scaled_exp(float x, float scale) { return __expf(x * scale); }

#endif
