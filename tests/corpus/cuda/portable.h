#pragma once

__device__ inline float fused(float a, float x, float y) { return a * x + y; }
