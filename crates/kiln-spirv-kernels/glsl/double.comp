#version 450
// data[i] *= 2: compiled with its entry named `forward`, and linked with
// halve.comp (entry `backward`) into one module of two compute entries.

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer Data {
    float data[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(data.length())) {
        data[i] = data[i] * 2.0;
    }
}
