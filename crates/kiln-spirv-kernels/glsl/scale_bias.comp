#version 450
// data[i] = data[i] * FACTOR + BIAS, the two set per pipeline through
// specialization constants: by number (0, 1) or by name.

layout(local_size_x = 64) in;

layout(constant_id = 0) const float FACTOR = 2.0;
layout(constant_id = 1) const float BIAS = 0.0;

layout(set = 0, binding = 0) buffer Data {
    float data[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(data.length())) {
        data[i] = data[i] * FACTOR + BIAS;
    }
}
