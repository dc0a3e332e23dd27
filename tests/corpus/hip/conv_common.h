// Shared by conv.hip: a quoted include beside the file.
#pragma once
#include "hip/hip_runtime.h"

__device__ inline float tap(const float* x, long at, long n) { return at >= 0 && at < n ? x[at] : 0.0f; }
