// A module as engines write them: it names itself, has no @compute
// function, and is built into each kernel that imports it.
#define_import_path shared::color

const LUMA: vec3<f32> = vec3<f32>(0.2126, 0.7152, 0.0722);

fn luminance(rgb: vec3<f32>) -> f32 {
    return dot(rgb, LUMA);
}
