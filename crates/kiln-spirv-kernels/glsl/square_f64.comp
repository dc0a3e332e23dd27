#version 450
// out[i] = in[i] * in[i] in double precision: a kernel that needs the
// device's 64-bit floats (wgpu's SHADER_F64).

layout(local_size_x = 64) in;

layout(set = 0, binding = 0) buffer Data {
    double data[];
};

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < uint(data.length())) {
        data[i] = data[i] * data[i];
    }
}
