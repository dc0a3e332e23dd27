//! The compute entry points of a module (B6): a WGSL file or a SPIR-V
//! module holds one or more, and each is a kernel of its own, built from
//! the same text with its name as the kernel's entry. Each is validated by
//! itself, so one broken entry fails alone.

use kiln_engine::CompileFailure;

use crate::diagnostics;

/// The names of `module`'s compute entry points, in the module's order.
pub(crate) fn compute_names(module: &naga::Module) -> Vec<String> {
    module
        .entry_points
        .iter()
        .filter(|entry| entry.stage == naga::ShaderStage::Compute)
        .map(|entry| entry.name.clone())
        .collect()
}

/// The names of the `@compute` functions of WGSL `source`, in the order
/// they are written: every one can be a kernel of its own (B6).
///
/// ```
/// use kiln_engine::KernelId;
/// use kiln_wgpu::WgslKernel;
///
/// let source = "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
///               @compute @workgroup_size(64) fn forward(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] *= 2.0; }\n\
///               @compute @workgroup_size(64) fn backward(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] *= 0.5; }\n";
/// let entries = kiln_wgpu::compute_entries(source)?;
/// assert_eq!(entries, ["forward", "backward"]);
/// // One kernel per entry, all of one text.
/// let kernels: Vec<WgslKernel> = entries
///     .iter()
///     .map(|entry| {
///         WgslKernel::builder(KernelId::named("example.passes"), entry.as_str())
///             .label("passes.wgsl")
///             .source(source)
///     })
///     .collect();
/// # assert_eq!(kernels.len(), 2);
/// # Ok::<(), kiln_engine::CompileFailure>(())
/// ```
///
/// # Errors
///
/// The source does not parse; the failure has naga's diagnostic with its
/// line and column, as the kernel's compile would.
pub fn compute_entries(source: &str) -> Result<Vec<String>, CompileFailure> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|error| diagnostics::parse_failure(&error, source, "source"))?;
    Ok(compute_names(&module))
}

#[cfg(test)]
mod tests {
    use super::*;

    // B6
    #[test]
    fn every_compute_entry_is_listed_and_no_other_stage() {
        let source = "@compute @workgroup_size(1) fn a() {}\n\
                      @vertex fn v() -> @builtin(position) vec4<f32> { return vec4<f32>(); }\n\
                      @compute @workgroup_size(1) fn b() {}\n";
        assert_eq!(compute_entries(source).expect("it parses"), ["a", "b"]);
        assert!(compute_entries("fn broken( {").is_err());
    }
}
