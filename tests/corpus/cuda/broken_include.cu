// A kernel whose header is nowhere: it fails naming the folders searched.
//
// kiln entry: lost

#include "nowhere.h"

extern "C" __global__ void lost(float* y) { y[0] = NOWHERE; }
