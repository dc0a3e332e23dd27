//! A job's manifest (R5): the kernels, by artifact id and object digest,
//! that every rank of a multi-process job finds in the store, written once
//! (`kiln manifest`) and read by every rank, so that every rank decides
//! alike which kernels load from the store and which compile in the
//! background, and none compiles while its peers wait in a collective.

use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};

use super::KernelLoader;
use crate::error::{FallbackMissing, KernelError};
use crate::id::ArtifactId;
use crate::store::{KeyComponents, KeyedCompiler};
use crate::target::{CompilationTarget, KernelOf, VariantOf};

/// The format a manifest's bytes carry.
const MANIFEST_FORMAT: u32 = 1;

/// One kernel of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestKernel {
    /// The kernel and variant as logs print them.
    pub kernel: String,
    /// Its artifact id, encoded as a warm-start profile holds it.
    pub id: Vec<u8>,
    /// The BLAKE3 digest of the artifact the store held when the manifest
    /// was written.
    pub object: [u8; 32],
}

/// The kernels every rank of a job loads from the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobManifest {
    format: u32,
    /// The program it was written for.
    pub program: String,
    /// The compiler's key components of its kernels.
    pub components: KeyComponents,
    /// Its kernels.
    pub kernels: Vec<ManifestKernel>,
}

impl JobManifest {
    /// A manifest of `kernels`, for `program` under `components`.
    pub fn new(program: &str, components: KeyComponents, kernels: Vec<ManifestKernel>) -> Self {
        Self {
            format: MANIFEST_FORMAT,
            program: program.to_owned(),
            components,
            kernels,
        }
    }

    /// The manifest as bytes, to write to a file every rank reads.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::encoding::encode(self).unwrap_or_default()
    }

    /// The manifest `bytes` hold, or `None` when they are not one of this
    /// format.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        crate::encoding::decode::<Self>(bytes)
            .ok()
            .filter(|(_, read)| *read == bytes.len())
            .map(|(manifest, _)| manifest)
            .filter(|manifest| manifest.format == MANIFEST_FORMAT)
    }
}

/// A loader's manifest: the encoded ids it lists.
pub(super) struct Listed(FxHashSet<Vec<u8>>);

impl<T: CompilationTarget + 'static> KernelLoader<T>
where
    KernelOf<T>: Clone,
{
    /// The same loader, deciding with `manifest` (R5): see
    /// [`load_listed`](Self::load_listed). A manifest of another compiler
    /// lists nothing this loader loads.
    pub fn with_manifest(mut self, manifest: &JobManifest) -> Self {
        let ours = manifest.components == self.target.compiler().key_components();
        if !ours {
            log::warn!(
                "the job manifest of {} was written for another compiler: it lists nothing here",
                manifest.program
            );
        }
        self.manifest = Some(Listed(
            manifest
                .kernels
                .iter()
                .filter(|_| ours)
                .map(|kernel| kernel.id.clone())
                .collect(),
        ));
        self
    }

    /// The kernel as the manifest decides, alike on every rank: loaded,
    /// one lookup; listed, loaded now ([`load`](Self::load): a store hit,
    /// as on every rank); not listed, [`load_or`](Self::load_or) (the
    /// fallback, the kernel compiling in the background), on every rank.
    /// Without a manifest, every kernel is not listed.
    ///
    /// # Errors
    ///
    /// A listed kernel's load failed; or, for one not listed, its fallback
    /// is not loaded.
    #[inline]
    pub fn load_listed(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
        fallback: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, ListedError> {
        if self.loaded.is_current(&self.store)
            && let Some(slot) = self.loaded.entries.get_mut(id)
        {
            return Ok(slot.ask(&mut self.profile));
        }
        self.load_listed_missing(kernel, id, fallback)
    }

    #[cold]
    #[inline(never)]
    fn load_listed_missing(
        &mut self,
        kernel: &KernelOf<T>,
        id: &ArtifactId<VariantOf<T>>,
        fallback: &ArtifactId<VariantOf<T>>,
    ) -> Result<T::Loaded, ListedError> {
        let listed = self.manifest.as_ref().is_some_and(|Listed(ids)| {
            crate::encoding::encode(id).is_ok_and(|bytes| ids.contains(&bytes))
        });
        if listed {
            Ok(self.load(kernel, id)?)
        } else {
            Ok(self.load_or(kernel, id, fallback)?)
        }
    }
}

/// Why [`KernelLoader::load_listed`] gave no kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListedError {
    /// A kernel the manifest lists failed to load.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// A kernel it does not list is not loaded, and neither is its
    /// fallback.
    #[error(transparent)]
    FallbackMissing(#[from] FallbackMissing),
}
