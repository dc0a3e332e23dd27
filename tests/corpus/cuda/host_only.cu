// A kernel file that includes a host-only header outside any `#if`: it
// fails saying what the header is and how to leave it out, never "add an
// include folder".
//
// kiln entry: noisy

#include <iostream>

extern "C" __global__ void noisy(float* y) { y[0] = 1.0f; }
