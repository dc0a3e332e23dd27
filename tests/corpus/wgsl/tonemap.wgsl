// A kernel that imports shared modules, as Bevy and vello lay them out.
// kiln specialize: EXPOSURE=2.0

#import shared::tonemap
#import shared::color

override EXPOSURE: f32 = 1.0;

@group(0) @binding(0) var<storage, read_write> pixels: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&pixels) {
        let rgb = tonemap::reinhard(pixels[id.x].rgb * EXPOSURE);
        pixels[id.x] = vec4<f32>(rgb, color::luminance(rgb));
    }
}
