// Includes hipRTC would look for itself (in CPATH, CPLUS_INCLUDE_PATH or
// the system's folder) if kiln left them to it: hipRTC's own headers,
// quoted and angle, and one that no folder holds, under an `#if`. Every
// byte hipRTC reads is one kiln keyed: the default compiles whatever those
// variables name, and WITH_EXTRA fails naming `extra.h`.
//
// kiln entry: offset
// kiln specialize: WITH_EXTRA=0
// kiln specialize: WITH_EXTRA=1

#include "hip/hip_runtime.h"
#include <hip/hip_fp16.h>
#if WITH_EXTRA
#include "extra.h"
#endif

#ifndef EXTRA_OFFSET
#define EXTRA_OFFSET 0.0f
#endif

extern "C" __global__ void offset(float* y) { y[threadIdx.x] += 1.0f + EXTRA_OFFSET; }
