#version 450
// data[i] /= 2: the `backward` entry of the two-entry module (see
// double.comp).

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer Data {
    float data[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(data.length())) {
        data[i] = data[i] * 0.5;
    }
}
