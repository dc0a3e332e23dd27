//! A stored artifact finalized again by another compiler from the recipe
//! kept after it: how `kiln warm --profile` prebuilds, for the compiler of
//! this machine, the kernels a program's profile names when the store holds
//! them only as another compiler's artifacts (another NVRTC, say). What is
//! finalized is the recipe's lowered form under the recipe's own id, so the
//! new artifact is the one a program of that id would compile here.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::key::{KeyedCompiler, StoreKey};
use super::recipe::{decode_value, encode_value};
use crate::encoding;
use crate::id::ArtifactId;

/// The artifact id encoded in `bytes` (a profile's kernel, a recipe's id),
/// when they are one whole id of variant `V`.
pub fn decode_id<V: DeserializeOwned>(bytes: &[u8]) -> Option<ArtifactId<V>> {
    match encoding::decode::<ArtifactId<V>>(bytes) {
        Ok((id, read)) if read == bytes.len() => Some(id),
        _ => None,
    }
}

/// What [`rebuild`] made: the value to store, and under which key.
#[derive(Debug)]
pub struct Rebuilt {
    /// The key of the recipe's id under the compiler that rebuilt it.
    pub key: StoreKey,
    /// The new artifact, then the same recipe: a value as the loader
    /// stores it.
    pub value: Vec<u8>,
    /// What finalizing took.
    pub work: Duration,
}

/// Finalizes the recipe kept in `stored` (a value of an artifact of
/// `compiler`'s type, by any compiler of its backend) with `compiler`.
///
/// # Errors
///
/// In words: the value keeps no recipe, is not of this compiler's types,
/// or the compiler failed (or panicked) on it.
pub fn rebuild<C: KeyedCompiler>(compiler: &C, stored: &[u8]) -> Result<Rebuilt, String> {
    let value = decode_value::<C::Artifact>(stored)?;
    let recipe = value.recipe.ok_or_else(|| {
        "its artifact keeps no recipe (stored by an older kiln, or without one)".to_owned()
    })?;
    let id = decode_id::<C::Variant>(&recipe.id)
        .ok_or_else(|| "its recipe's id is not this compiler's".to_owned())?;
    let lowered = match encoding::decode::<C::Lowered>(&recipe.lowered) {
        Ok((lowered, read)) if read == recipe.lowered.len() => lowered,
        _ => return Err("its recipe's text is not this compiler's".to_owned()),
    };
    let started = Instant::now();
    let finalized = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        compiler.finalize(&id, lowered)
    }))
    .map_err(|payload| {
        format!(
            "the compiler panicked: {}",
            crate::panic::panic_message(payload)
        )
    })?
    .map_err(|failure| failure.to_string())?;
    let work = started.elapsed();
    let value = encode_value(&finalized.artifact, Some(&recipe))?;
    Ok(Rebuilt {
        key: StoreKey::for_artifact(&compiler.key_components(), &id, compiler.entry_point(&id)),
        value,
        work,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fake::{FakeCompiler, FakeKernel, FakeTarget};
    use crate::store::{ArtifactStore, KeyComponents, Lookup, MemoryStore};
    use crate::{Kernel, KernelLoader};

    // A stored artifact of one compiler, finalized again by another from
    // its recipe, lands under the other's key with the same recipe.
    #[test]
    fn another_compiler_rebuilds_a_stored_artifact_from_its_recipe() {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let kernel = FakeKernel::new(7);
        let id = kernel.artifact_id();
        let old = FakeCompiler::default();
        {
            let mut loader = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)));
            loader.load(&kernel, &id).expect("the kernel compiles");
        }
        let stored_key = StoreKey::for_artifact(&old.key_components(), &id, old.entry_point(&id));
        let Lookup::Hit { artifact, .. } = store.lookup(&stored_key) else {
            panic!("the loader stored the kernel");
        };
        let new = FakeCompiler::default().with_key_components(KeyComponents::new(
            "fake",
            "kiln-fake 2",
            "fake_1",
            "",
        ));
        let rebuilt = rebuild(&new, &artifact).expect("the recipe finalizes again");
        let expected = StoreKey::for_artifact(&new.key_components(), &id, new.entry_point(&id));
        assert_eq!(rebuilt.key.digest(), expected.digest());
        assert_ne!(rebuilt.key.digest(), stored_key.digest());
        let value =
            decode_value::<<FakeCompiler as crate::ArtifactCompiler>::Artifact>(&rebuilt.value)
                .expect("a value as the loader stores it");
        let recipe = value.recipe.expect("the recipe is kept");
        assert_eq!(decode_id(&recipe.id), Some(id.clone()));
        assert_eq!(kernel.id(), id.kernel);

        // The artifact alone, without its recipe, is not rebuilt.
        let stored = decode_value::<<FakeCompiler as crate::ArtifactCompiler>::Artifact>(&artifact)
            .expect("the stored value decodes");
        let bare = encode_value(&stored.artifact, None).expect("encodes");
        let error = rebuild(&new, &bare).expect_err("no recipe, no rebuild");
        assert!(error.contains("no recipe"), "{error}");
    }
}
