#version 450
// A workgroup of 1024 x 1024 invocations: valid SPIR-V, and more than any
// device's limits allow, so the device refuses the pipeline.

layout(local_size_x = 1024, local_size_y = 1024) in;

void main() {
}
