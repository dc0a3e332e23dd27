//! The wgpu features a kernel's shader needs (i64, f64, f16, subgroups,
//! ...), found by naga when it validates the kernel, and checked against
//! the device it loads on, or against the features a compile-only target
//! stands for (B6).
//!
//! Validation in finalize depends on no device: naga validates with every
//! shader feature allowed, then finds which of [`SHADER_FEATURES`] the
//! kernel cannot do without, and the artifact keeps their names. Loading
//! compares them with the device's features (or a compile-only target's),
//! so a store filled anywhere gives every machine with the same features
//! the same answer, and a kernel that needs a feature the device lacks
//! fails naming it.

use kiln_engine::DeviceRefusal;
use naga::WithSpan;
use naga::valid::{Capabilities, ModuleInfo, ValidationError, ValidationFlags, Validator};

/// The wgpu features that let a compute shader do more (every feature that
/// maps to a naga validation capability a compute shader can use):
/// [`WgpuDevice::open`](crate::WgpuDevice::open) asks for each the adapter
/// has, and a kernel's artifact names those it needs.
pub const SHADER_FEATURES: wgpu::Features = wgpu::Features::SHADER_F64
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SHADER_I16)
    .union(wgpu::Features::SHADER_INT64)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
    .union(wgpu::Features::SHADER_FLOAT32_ATOMIC)
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::IMMEDIATES)
    .union(wgpu::Features::TEXTURE_ATOMIC)
    .union(wgpu::Features::TEXTURE_INT64_ATOMIC)
    .union(wgpu::Features::TEXTURE_FORMAT_16BIT_NORM)
    .union(wgpu::Features::TEXTURE_BINDING_ARRAY)
    .union(wgpu::Features::BUFFER_BINDING_ARRAY)
    .union(wgpu::Features::STORAGE_RESOURCE_BINDING_ARRAY)
    .union(wgpu::Features::SAMPLED_TEXTURE_AND_STORAGE_BUFFER_ARRAY_NON_UNIFORM_INDEXING)
    .union(wgpu::Features::UNIFORM_BUFFER_BINDING_ARRAYS)
    .union(wgpu::Features::STORAGE_TEXTURE_ARRAY_NON_UNIFORM_INDEXING)
    .union(wgpu::Features::MEMORY_DECORATION_COHERENT)
    .union(wgpu::Features::MEMORY_DECORATION_VOLATILE);

/// The features a compile-only target stands for unless told otherwise:
/// none of [`SHADER_FEATURES`], what every adapter has. A kernel that needs
/// more is refused there as on a device without it, so a folder warmed
/// without a device gives the answer the most modest device gives;
/// [`WgpuTarget::compile_only_for`](crate::WgpuTarget::compile_only_for)
/// names the features of the adapter meant.
pub const DEFAULT_COMPILE_ONLY_FEATURES: wgpu::Features = wgpu::Features::empty();

/// naga's capabilities under `features`, as wgpu maps them (downlevel
/// flags all given: a Vulkan adapter has them).
fn capabilities(features: wgpu::Features) -> Capabilities {
    wgpu_naga_bridge::features_to_naga_capabilities(features, wgpu::DownlevelFlags::all())
}

fn validate(
    module: &naga::Module,
    features: wgpu::Features,
) -> Result<ModuleInfo, Box<WithSpan<ValidationError>>> {
    Validator::new(ValidationFlags::all(), capabilities(features))
        .validate(module)
        .map_err(Box::new)
}

/// Validates `module` with every shader feature allowed, and returns the
/// features among [`SHADER_FEATURES`] it needs, with naga's analysis.
///
/// # Errors
///
/// naga's first validation error under every shader feature: the module
/// is wrong on every device.
pub(crate) fn validate_needing(
    module: &naga::Module,
) -> Result<(wgpu::Features, ModuleInfo), Box<WithSpan<ValidationError>>> {
    // Most kernels need nothing: one validation says so.
    if let Ok(info) = validate(module, wgpu::Features::empty()) {
        return Ok((wgpu::Features::empty(), info));
    }
    let info = validate(module, SHADER_FEATURES)?;
    let needed = SHADER_FEATURES
        .iter()
        .filter(|feature| validate(module, SHADER_FEATURES.difference(*feature)).is_err())
        .fold(wgpu::Features::empty(), |needed, feature| needed | feature);
    Ok((needed, info))
}

/// The names of `features`, in wgpu's order: `SHADER_F64`, `SUBGROUP`.
pub fn feature_names(features: wgpu::Features) -> Vec<String> {
    features
        .iter_names()
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// The features named in `text`, separated by spaces or commas, as wgpu
/// spells them (`SHADER_F64, SUBGROUP`), case-insensitive: what a program
/// or a command line gives
/// [`WgpuTarget::compile_only_for`](crate::WgpuTarget::compile_only_for).
///
/// ```
/// use kiln_wgpu::{parse_features, wgpu};
///
/// let features = parse_features("shader_f64, SUBGROUP").expect("two features");
/// assert_eq!(features, wgpu::Features::SHADER_F64 | wgpu::Features::SUBGROUP);
/// assert!(parse_features("SHADER_F128").is_err());
/// ```
///
/// # Errors
///
/// A name wgpu does not know, with the shader features it does.
pub fn parse_features(text: &str) -> Result<wgpu::Features, String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|name| !name.is_empty())
        .try_fold(
            wgpu::Features::empty(),
            |features, name| match wgpu::Features::from_name(&name.to_ascii_uppercase()) {
                Some(feature) => Ok(features | feature),
                None => Err(format!(
                    "`{name}` is not a wgpu feature; the shader features are {}",
                    feature_names(SHADER_FEATURES).join(", ")
                )),
            },
        )
}

/// Who a kernel is loaded on, for the message of a missing feature.
pub(crate) enum LoadedOn<'a> {
    /// A device: its adapter's name and, when kiln opened it, the adapter's
    /// features.
    Device {
        adapter: &'a str,
        adapter_features: Option<wgpu::Features>,
    },
    /// A compile-only target standing for these features.
    CompileOnly,
}

/// Refuses a kernel needing features (`needed`, by name) that `have` lacks,
/// naming each and how to get it.
pub(crate) fn check(
    entry: &str,
    needed: &[String],
    have: wgpu::Features,
    on: &LoadedOn<'_>,
) -> Result<(), DeviceRefusal> {
    let missing: Vec<&str> = needed
        .iter()
        .map(String::as_str)
        .filter(|name| {
            wgpu::Features::from_name(name).is_none_or(|feature| !have.contains(feature))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.join(", ");
    let (plural, them) = if missing.len() == 1 {
        ("", "it")
    } else {
        ("s", "them")
    };
    let message = match on {
        LoadedOn::Device {
            adapter,
            adapter_features: Some(adapter_features),
        } => {
            let absent: Vec<&str> = missing
                .iter()
                .copied()
                .filter(|name| {
                    wgpu::Features::from_name(name)
                        .is_none_or(|feature| !adapter_features.contains(feature))
                })
                .collect();
            format!(
                "kernel `{entry}` needs the wgpu feature{plural} {list}, and the adapter \
                 `{adapter}` does not have {}: load it on an adapter that has {them}",
                absent.join(", ")
            )
        }
        LoadedOn::Device { adapter, .. } => format!(
            "kernel `{entry}` needs the wgpu feature{plural} {list}, which this device (on \
             `{adapter}`) was not created with: request {them} in \
             wgpu::DeviceDescriptor::required_features when creating the device (where the \
             adapter has {them}), or let WgpuDevice::open create it, which asks for every \
             shader feature the adapter has"
        ),
        LoadedOn::CompileOnly => format!(
            "kernel `{entry}` needs the wgpu feature{plural} {list}, which this compile-only \
             target does not stand for (it has {}): name the adapter the kernels are for \
             with KILN_WGPU_PROFILE (a built-in profile such as `lavapipe`, or a profile file \
             written on its machine), or its features with WgpuTarget::compile_only_for",
            if have.is_empty() {
                "none".to_owned()
            } else {
                feature_names(have).join(", ")
            }
        ),
    };
    Err(DeviceRefusal::new(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs(source: &str) -> wgpu::Features {
        let module = naga::front::wgsl::parse_str(source).expect("the source parses");
        validate_needing(&module).expect("the source validates").0
    }

    // B6
    #[test]
    fn a_kernel_needs_exactly_the_features_its_types_use() {
        assert_eq!(
            needs("@compute @workgroup_size(1) fn main() { var x: f32 = 1.0; x += 1.0; }"),
            wgpu::Features::empty()
        );
        assert_eq!(
            needs("@compute @workgroup_size(1) fn main() { var x: f64 = 1.0lf; x += 1.0lf; }"),
            wgpu::Features::SHADER_F64
        );
        assert_eq!(
            needs(
                "@group(0) @binding(0) var<storage, read_write> out: array<i64>;\n\
                 @compute @workgroup_size(1) fn main() { out[0] = out[1] * 3li; }"
            ),
            wgpu::Features::SHADER_INT64
        );
        assert_eq!(
            needs(
                "enable f16;\n\
                 @group(0) @binding(0) var<storage, read_write> out: array<f16>;\n\
                 @compute @workgroup_size(1) fn main() { out[0] = out[1] * 2.0h; }"
            ),
            wgpu::Features::SHADER_F16
        );
    }

    // B6
    #[test]
    fn a_missing_feature_is_named_with_how_to_get_it() {
        let needed = vec!["SHADER_F64".to_owned()];
        let refused = check(
            "main",
            &needed,
            wgpu::Features::empty(),
            &LoadedOn::Device {
                adapter: "test adapter",
                adapter_features: None,
            },
        )
        .expect_err("the device lacks f64");
        assert!(refused.message.contains("SHADER_F64"), "{refused:?}");
        assert!(refused.message.contains("required_features"), "{refused:?}");
        let compile_only = check(
            "main",
            &needed,
            wgpu::Features::empty(),
            &LoadedOn::CompileOnly,
        )
        .expect_err("the default compile-only target lacks f64");
        assert!(
            compile_only.message.contains("compile_only_for"),
            "{compile_only:?}"
        );
        assert!(
            check(
                "main",
                &needed,
                wgpu::Features::SHADER_F64,
                &LoadedOn::CompileOnly
            )
            .is_ok()
        );
    }
}
