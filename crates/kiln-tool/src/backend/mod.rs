//! The backends the command knows, as data: one [`Backend`] value each in
//! [`ALL`], each in its own file. Everything the command does by backend
//! (which files `kiln warm` gives it and how it compiles them, how `kiln
//! ls` reads its artifacts and names their variants, how `kiln verify
//! --recompile` compiles them again, which compile workers the binaries
//! serve) goes through this table: no other module names a backend.
//!
//! A new backend is its crate, one file here and one line in [`ALL`].

mod batch;
mod cuda;
mod cxx;
mod hip;
mod options;
mod prebuilt;
pub mod show;
mod wgpu;
pub(crate) mod wgpu_early;
pub mod wgsl;

use std::path::PathBuf;
use std::sync::Arc;

use kiln_engine::profile::StoredProfile;
use kiln_engine::store::{ArtifactStore, Recompiled, recompile};
use kiln_engine::worker::WorkerEntry;
use kiln_engine::{ArtifactCompiler, ArtifactReport, KeyedCompiler, StoreKey};

pub use batch::BackendReport;
pub use prebuilt::{Outcome, Prebuilt};

use crate::kernel::Language;
use crate::manifest::KernelFile;
use crate::progress::Shown;

/// Every backend, in the order `kiln warm` runs them.
pub static ALL: [&dyn Backend; 3] = [&wgpu::Wgpu, &cuda::Cuda, &hip::Hip];

/// The backend called `name`, if the command knows it.
pub fn named(name: &str) -> Option<&'static dyn Backend> {
    ALL.iter().copied().find(|backend| backend.name() == name)
}

/// The names of [`ALL`], for the options that take one.
pub fn names() -> Vec<&'static str> {
    ALL.iter().map(|backend| backend.name()).collect()
}

/// The compile workers of every backend that has them, for the hook at the
/// start of `main`.
pub fn worker_entries() -> Vec<WorkerEntry> {
    ALL.iter()
        .filter_map(|backend| backend.worker_entry())
        .collect()
}

/// The variant of `key` as its backend names it (`sm_90`, `gfx90a`, `-`
/// for wgpu), read from the variant's bytes, so an entry stored by any
/// earlier kiln shows the same; the key's own text for a backend this
/// command does not know.
pub fn variant_label(key: &StoreKey) -> String {
    named(&key.components.backend)
        .and_then(|backend| backend.variant_label(key))
        .unwrap_or_else(|| key.variant_text.clone())
}

/// The architectures `kiln warm` is asked to compile for, one option per
/// backend that has architectures; each backend reads its own
/// ([`Backend::asked_architectures`]).
#[derive(Debug, Default, clap::Args)]
pub struct Architectures {
    /// The CUDA architectures to compile for, comma-separated
    /// (`sm_80,sm_90`): one batch each, loaded on the NVIDIA GPU when it is
    /// of that architecture, compiled only otherwise. Default: the GPU's,
    /// else sm_90.
    #[arg(long, value_delimiter = ',', value_name = "sm_XX,...")]
    pub cuda_arch: Vec<String>,
    /// The AMD architectures to compile for, comma-separated
    /// (`gfx90a,gfx942`): one batch each, as for --cuda-arch. Default: the
    /// AMD GPU's, else gfx90a.
    #[arg(long, value_delimiter = ',', value_name = "gfxXXX,...")]
    pub hip_arch: Vec<String>,
}

/// What one backend's batch of `kiln warm` works on.
pub struct Job<'a> {
    /// The kernel files it takes, in the folder's order.
    pub files: Vec<&'a KernelFile>,
    /// The store (and the fleet tier behind it) the batch fills.
    pub store: Option<Arc<dyn ArtifactStore>>,
    /// The architecture asked for; `None`: the device's, else the
    /// backend's default.
    pub architecture: Option<&'a str>,
    /// `--include` folders, for the backends that include.
    pub include: &'a [PathBuf],
    /// The folder warmed: a kernel's quoted includes may reach files
    /// under it, besides its include folders (P13).
    pub tree: &'a std::path::Path,
    /// `--allow-outside-includes`: includes may reach files anywhere.
    pub outside_includes: bool,
    /// `--retry-failed`: compile remembered failures again.
    pub retry_failed: bool,
    /// How the batch's progress is shown (`--progress`).
    pub progress: Shown,
}

/// One backend, as the command uses it. Object-safe: [`ALL`] holds them
/// as `&dyn Backend`.
pub trait Backend: Sync {
    /// Its name in keys and on the command line: `cuda`.
    fn name(&self) -> &'static str;

    /// The kinds of kernel file it compiles.
    fn languages(&self) -> &'static [Language];

    /// Whether `kiln warm` gives it `file`; `asked` when `--backend` names
    /// it.
    fn takes(&self, file: &KernelFile, asked: bool) -> bool {
        let _ = asked;
        self.languages().contains(&file.language)
    }

    /// The option that picks its architectures, if it has architectures.
    fn architecture_option(&self) -> Option<&'static str> {
        None
    }

    /// The architectures `asked` names for it: each a batch of its own.
    fn asked_architectures<'a>(&self, asked: &'a Architectures) -> &'a [String] {
        let _ = asked;
        &[]
    }

    /// Why `text` is no architecture of this backend, if it is none.
    fn check_architecture(&self, text: &str) -> Result<(), String> {
        let _ = text;
        Ok(())
    }

    /// Compiles `job`'s files in one batch (one per architecture asked
    /// for), on its device when there is one, else compile-only.
    fn warm(&self, job: &Job<'_>) -> BackendReport;

    /// Its compiler's entry for compile worker processes, if its compiler
    /// runs in them.
    fn worker_entry(&self) -> Option<WorkerEntry> {
        None
    }

    /// The variant of `key` in its vendor's words; `None` when the
    /// variant's bytes are not this backend's.
    fn variant_label(&self, key: &StoreKey) -> Option<String>;

    /// The report (D4) kept in a stored artifact of this backend.
    fn stored_report(&self, bytes: &[u8]) -> Option<ArtifactReport>;

    /// What a stored artifact of this backend was compiled with beyond its
    /// source (defines, pipeline constants), one word each, read from the
    /// recipe kept after it; `None` for a value kept without a recipe.
    fn specialization(&self, bytes: &[u8]) -> Option<Vec<String>>;

    /// Its compiler on this machine, to compile stored entries again, or
    /// why there is none.
    fn recompiler(&self) -> Result<Box<dyn Recompiler>, String>;
}

/// A backend's compiler on this machine, working on what a store holds:
/// entries compiled again from their recipes.
pub trait Recompiler {
    /// Compiles the entry of `key` again and compares; why not, when this
    /// compiler is not the one that stored it.
    fn recompile(&self, key: &StoreKey, bytes: &[u8]) -> Result<Recompiled, String>;

    /// Prebuilds in `store`, for this compiler, every kernel of `profile`
    /// (a profile of this backend): what came of each.
    fn prebuild(&self, store: &dyn ArtifactStore, profile: &StoredProfile) -> Vec<Prebuilt>;

    /// The key components this machine's compiler makes for
    /// `architecture` (its default architecture's, when it does not know
    /// that one): what `kiln import` checks a bundle for an empty store
    /// against.
    fn components_here(&self, architecture: &str) -> kiln_engine::KeyComponents;
}

/// A [`Recompiler`] of compiler `C`, keyed for the architecture a key
/// names by `keyed_for` (what it compiles is the same; the artifact
/// records its keys).
struct Keyed<C> {
    compiler: C,
    keyed_for: fn(&C, &str) -> Option<C>,
}

/// A recompiler of `compiler`, keyed per key by `keyed_for`.
fn keyed<C>(compiler: C, keyed_for: fn(&C, &str) -> Option<C>) -> Box<dyn Recompiler>
where
    C: ArtifactCompiler + KeyedCompiler + 'static,
{
    Box::new(Keyed {
        compiler,
        keyed_for,
    })
}

impl<C: ArtifactCompiler + KeyedCompiler> Recompiler for Keyed<C> {
    fn recompile(&self, key: &StoreKey, bytes: &[u8]) -> Result<Recompiled, String> {
        let keyed = (self.keyed_for)(&self.compiler, &key.components.architecture);
        let compiler = keyed.as_ref().unwrap_or(&self.compiler);
        let here = compiler.key_components();
        if here.compiler != key.components.compiler {
            return Err(format!(
                "stored by {}, and this machine has {}",
                key.components.compiler, here.compiler
            ));
        }
        if here != key.components {
            return Err(format!(
                "stored under other key components ({:?}) than this machine's compiler makes \
                 ({here:?})",
                key.components
            ));
        }
        Ok(recompile(compiler, key, bytes))
    }

    fn prebuild(&self, store: &dyn ArtifactStore, profile: &StoredProfile) -> Vec<Prebuilt> {
        let keyed = (self.keyed_for)(&self.compiler, &profile.components.architecture);
        prebuilt::prebuild(keyed.as_ref().unwrap_or(&self.compiler), store, profile)
    }

    fn components_here(&self, architecture: &str) -> kiln_engine::KeyComponents {
        let keyed = (self.keyed_for)(&self.compiler, architecture);
        keyed.as_ref().unwrap_or(&self.compiler).key_components()
    }
}

/// The variant of `key` as compiler `C` names it.
/// The lowered form `L` of the recipe kept after the artifact `A` in a
/// stored value.
fn lowered<A: serde::de::DeserializeOwned, L: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Option<L> {
    kiln_engine::store::decode_value::<A>(bytes)
        .ok()?
        .recipe?
        .lowered_as::<L>()
}

fn label_as<C: KeyedCompiler>(key: &StoreKey) -> Option<String> {
    key.decode_variant::<C::Variant>()
        .map(|variant| C::variant_label(&variant))
}

/// Whether `file`'s header names `backend` among its backends; `None`
/// when it names none.
fn declares(file: &KernelFile, backend: &str) -> Option<bool> {
    file.backends
        .as_ref()
        .map(|backends| backends.iter().any(|named| named == backend))
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

    #[test]
    fn every_backend_is_found_by_its_name_once() {
        for backend in ALL {
            let found = named(backend.name()).expect("every backend is named");
            assert!(std::ptr::addr_eq(found, backend));
        }
        let mut sorted = names();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ALL.len(), "no two backends share a name");
        assert!(named("metal").is_none());
    }

    /// `kiln-worker` is a binary of its own, without this table: its list
    /// (`workers.rs`, which it includes) must serve every compiler the
    /// table runs in workers.
    #[test]
    fn the_worker_program_serves_every_backend_with_workers() {
        let program = include_str!("workers.rs");
        for backend in ALL
            .iter()
            .filter(|backend| backend.worker_entry().is_some())
        {
            let entry = format!("kiln_{}::worker_entry()", backend.name());
            assert!(
                program.contains(&entry),
                "kiln-worker must serve {}: add `{entry}` to its list",
                backend.name()
            );
        }
    }
}
