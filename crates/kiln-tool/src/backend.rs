//! What the command knows of each backend by name: which there are, and
//! how each names the variant its entries were stored under.

use kiln_cuda::CudaCompiler;
use kiln_engine::KeyedCompiler;
use kiln_engine::StoreKey;
use kiln_hip::HipCompiler;
use kiln_wgpu::WgpuCompiler;

/// The backends `kiln warm` runs, in the order it runs them.
pub const BACKENDS: [&str; 3] = ["wgpu", "cuda", "hip"];

/// The variant of `key` as its backend names it (`sm_90`, `gfx90a`, `-`
/// for wgpu), read from the variant's bytes, so an entry stored by any
/// earlier kiln shows the same; the key's own text for a backend this
/// command does not know.
pub fn variant_label(key: &StoreKey) -> String {
    let label = match key.components.backend.as_str() {
        "cuda" => label_as::<CudaCompiler>(key),
        "hip" => label_as::<HipCompiler>(key),
        "wgpu" => label_as::<WgpuCompiler>(key),
        _ => None,
    };
    label.unwrap_or_else(|| key.variant_text.clone())
}

fn label_as<C: KeyedCompiler>(key: &StoreKey) -> Option<String> {
    key.decode_variant::<C::Variant>()
        .map(|variant| C::variant_label(&variant))
}

#[cfg(test)]
mod tests {
    use kiln_cuda::{Architecture, CudaVariant};
    use kiln_engine::{ArtifactId, KernelId, KeyComponents};
    use kiln_hip::HipVariant;
    use kiln_wgpu::WgpuVariant;

    use super::*;

    fn key_of<V: serde::Serialize + std::fmt::Debug>(backend: &str, variant: V) -> StoreKey {
        let id = ArtifactId::new(KernelId::named("k").build(), variant);
        StoreKey::for_artifact(
            &KeyComponents::new(backend, "compiler", "arch", ""),
            &id,
            None,
        )
    }

    #[test]
    fn variants_read_as_their_vendors_name_them() {
        let cuda = CudaVariant {
            architecture: "sm_90".parse::<Architecture>().expect("an architecture"),
        };
        assert_eq!(variant_label(&key_of("cuda", cuda)), "sm_90");
        let hip = HipVariant::new(kiln_hip::Architecture::new("gfx90a").expect("valid"));
        assert_eq!(variant_label(&key_of("hip", hip)), "gfx90a");
        assert_eq!(variant_label(&key_of("wgpu", WgpuVariant)), "-");
        assert_eq!(
            variant_label(&key_of("fake", ())),
            "()",
            "an unknown backend shows the key's text"
        );
    }
}
