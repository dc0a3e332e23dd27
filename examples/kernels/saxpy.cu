// kiln entry: saxpy
//
// y[i] = a * x[i] + y[i], the CUDA twin of saxpy.wgsl.

extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
