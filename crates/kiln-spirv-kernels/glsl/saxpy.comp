#version 450
// y = a * x + y over n elements.

layout(local_size_x = 128) in;

layout(set = 0, binding = 0) uniform Params {
    float a;
    uint n;
};
layout(set = 0, binding = 1) readonly buffer X {
    float x[];
};
layout(set = 0, binding = 2) buffer Y {
    float y[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
