//! `kiln warm --profile`'s work for one backend: each kernel a program's
//! warm-start profile names, prebuilt for this machine's compiler from what
//! the store holds. A profile names kernels by their artifact ids, never by
//! their source, so a kernel is prebuilt only when the store holds it
//! already (for this compiler) or holds another compiler's artifact of it
//! with the recipe it was finalized from; every other one is reported, with
//! what would build it.

use kiln_engine::profile::StoredProfile;
use kiln_engine::store::{ArtifactStore, ArtifactStoreExt, decode_id, rebuild};
use kiln_engine::{KeyedCompiler, Lookup, StoreKey, StoreOutcome};
use serde::Serialize;

/// What came of one profiled kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The store holds its artifact for this compiler: nothing to build.
    InStore,
    /// Finalized here from another compiler's artifact's recipe, and
    /// stored.
    Rebuilt,
    /// Not prebuilt; the reason says why.
    NotPrebuilt,
}

/// One profiled kernel, and what came of it.
#[derive(Debug, Serialize)]
pub struct Prebuilt {
    /// The kernel and variant, as the profile names it.
    pub kernel: String,
    pub outcome: Outcome,
    /// Why it was not prebuilt, and what would build it.
    pub reason: Option<String>,
}

/// Why a kernel the store holds nothing of cannot be prebuilt.
const NO_SOURCE: &str = "the store holds neither its artifact nor a recipe to build it from, \
     and a profile names the kernels a program loaded, not their source: `kiln warm DIR` on \
     the kernels' folder, or the program itself run with KILN_MODE=compile-only, builds it";

/// Prebuilds `profile`'s kernels in `store` for `compiler`.
pub fn prebuild<C: KeyedCompiler>(
    compiler: &C,
    store: &dyn ArtifactStore,
    profile: &StoredProfile,
) -> Vec<Prebuilt> {
    let here = compiler.key_components();
    profile
        .kernels
        .iter()
        .map(|kernel| {
            let (outcome, reason) = match prebuild_one(compiler, &here, store, profile, &kernel.id)
            {
                Ok(outcome) => (outcome, None),
                Err(reason) => (Outcome::NotPrebuilt, Some(reason)),
            };
            Prebuilt {
                kernel: kernel.kernel.clone(),
                outcome,
                reason,
            }
        })
        .collect()
}

fn prebuild_one<C: KeyedCompiler>(
    compiler: &C,
    here: &kiln_engine::KeyComponents,
    store: &dyn ArtifactStore,
    profile: &StoredProfile,
    id: &[u8],
) -> Result<Outcome, String> {
    let id = decode_id::<C::Variant>(id).ok_or_else(|| {
        "its id is not one this kiln reads (the profile was written by another kiln)".to_owned()
    })?;
    let entry = compiler.entry_point(&id);
    let key = StoreKey::for_artifact(here, &id, entry.clone());
    if matches!(store.lookup(&key), Lookup::Hit { .. }) {
        return Ok(Outcome::InStore);
    }
    if *here == profile.components {
        return Err(NO_SOURCE.to_owned());
    }
    let theirs = StoreKey::for_artifact(&profile.components, &id, entry);
    let Lookup::Hit { artifact, .. } = store.lookup(&theirs) else {
        return Err(NO_SOURCE.to_owned());
    };
    let rebuilt = rebuild(compiler, &artifact).map_err(|reason| {
        format!(
            "the store holds it only as {}'s artifact, and {reason}",
            profile.components.compiler
        )
    })?;
    if rebuilt.key.digest() != key.digest() {
        return Err("its recipe is of another kernel than the profile names".to_owned());
    }
    match store.put(&rebuilt.key, None, &rebuilt.value, rebuilt.work) {
        StoreOutcome::Stored { .. } => Ok(Outcome::Rebuilt),
        StoreOutcome::Skipped => Err("rebuilt, but the store is read-only".to_owned()),
        StoreOutcome::Failed { detail } => Err(format!("rebuilt, but not stored: {detail}")),
    }
}
