//! What an artifact was finalized from, kept after its bytes in the store,
//! so it can be finalized again and compared (`kiln verify --recompile`): a
//! nondeterministic compiler, or an entry damaged in a way its digest did
//! not catch (it was stored damaged), shows as bytes that differ.
//!
//! Before its bytes are compared, a recipe is checked against the key of
//! the record that led to it: the key its id makes must be that record's.
//! A record that names another kernel's object (whose digest checks out,
//! and whose recipe compiles to its bytes) is so told from a whole entry
//! ([`Recompiled::OtherKey`]), rather than vouched for.
//!
//! A stored value is the encoded artifact, then, when the loader kept it,
//! the encoded [`Recipe`]. A reader of the artifact decodes the first part;
//! the rest, when there is any, must be one whole recipe, or the value is
//! not this compiler's.

use serde::{Deserialize, Serialize};

use super::key::{KeyedCompiler, StoreKey, hex};
use crate::encoding;
use crate::id::ArtifactId;

/// What an artifact was finalized from: the artifact's id and its lowered
/// form, each encoded as a worker process receives them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    /// The encoded [`ArtifactId`].
    #[serde(with = "super::bytes")]
    pub id: Vec<u8>,
    /// The encoded lowered form ([`ArtifactCompiler::Lowered`](crate::ArtifactCompiler::Lowered)).
    #[serde(with = "super::bytes")]
    pub lowered: Vec<u8>,
}

impl Recipe {
    /// The recipe of `id` finalized from `lowered`; `None` when either does
    /// not serialize.
    pub fn of<V: Serialize, L: Serialize>(id: &ArtifactId<V>, lowered: &L) -> Option<Self> {
        Some(Self {
            id: encoding::encode(id).ok()?,
            lowered: encoding::encode(lowered).ok()?,
        })
    }

    /// Its lowered form, decoded as `L` (what a listing shows of it: the
    /// defines or constants it was compiled with); `None` when it is not
    /// an `L`.
    pub fn lowered_as<L: serde::de::DeserializeOwned>(&self) -> Option<L> {
        encoding::decode::<L>(&self.lowered)
            .ok()
            .map(|(lowered, _)| lowered)
    }
}

/// A stored value taken apart: the artifact's bytes and the recipe after
/// them, if one was kept.
#[derive(Debug, PartialEq, Eq)]
pub struct StoredValue<'a, A> {
    /// The artifact.
    pub artifact: A,
    /// The artifact's own bytes, the recipe left out.
    pub artifact_bytes: &'a [u8],
    /// The recipe kept after it.
    pub recipe: Option<Recipe>,
}

/// `artifact`'s value as a store keeps it: its bytes, then `recipe`'s.
///
/// # Errors
///
/// The artifact or the recipe does not serialize.
pub(crate) fn encode_value<A: Serialize>(
    artifact: &A,
    recipe: Option<&Recipe>,
) -> Result<Vec<u8>, String> {
    let mut bytes = encoding::encode(artifact).map_err(|error| error.to_string())?;
    if let Some(recipe) = recipe {
        encoding::encode_to(recipe, &mut bytes).map_err(|error| error.to_string())?;
    }
    Ok(bytes)
}

/// Takes a stored value apart.
///
/// # Errors
///
/// Why the bytes are not an artifact of type `A`, optionally followed by
/// one whole recipe.
pub fn decode_value<A: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<StoredValue<'_, A>, String> {
    let (artifact, read) = encoding::decode::<A>(bytes).map_err(|error| error.to_string())?;
    let (artifact_bytes, rest) = bytes.split_at(read);
    let recipe = if rest.is_empty() {
        None
    } else {
        match encoding::decode::<Recipe>(rest) {
            Ok((recipe, used)) if used == rest.len() => Some(recipe),
            Ok(_) => return Err("bytes left over after the recipe".into()),
            Err(error) => return Err(format!("bytes after the artifact: {error}")),
        }
    };
    Ok(StoredValue {
        artifact,
        artifact_bytes,
        recipe,
    })
}

/// What finalizing a stored value's recipe again gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recompiled {
    /// The same bytes as stored.
    Same,
    /// Other bytes: the compiler is not deterministic, or the entry was
    /// stored damaged. Both sizes, in bytes.
    Different {
        /// The stored artifact's size.
        stored: usize,
        /// The recompiled artifact's size.
        recompiled: usize,
    },
    /// The value keeps no recipe (stored without one, or by an older kiln).
    NoRecipe,
    /// The value, its recipe or the new artifact is not what this compiler
    /// reads or writes.
    Undecodable(String),
    /// The compiler failed on the recipe, with its message.
    Failed(String),
    /// The recipe is of another key than the record's: the record names
    /// another kernel's artifact. What the recipe is of, in words.
    OtherKey(String),
}

/// Finalizes the recipe kept in `stored`, the value the record of `key`
/// names, again with `compiler`, and compares the artifact it makes with
/// the stored one, byte for byte; first checks that the recipe is of
/// `key`: the key its id makes, under `compiler`'s components, is `key`.
pub fn recompile<C: KeyedCompiler>(compiler: &C, key: &StoreKey, stored: &[u8]) -> Recompiled {
    let value = match decode_value::<C::Artifact>(stored) {
        Ok(value) => value,
        Err(detail) => return Recompiled::Undecodable(detail),
    };
    let Some(recipe) = value.recipe else {
        return Recompiled::NoRecipe;
    };
    let id = match encoding::decode::<ArtifactId<C::Variant>>(&recipe.id) {
        Ok((id, read)) if read == recipe.id.len() => id,
        Ok(_) => return Recompiled::Undecodable("the recipe's id has bytes left over".into()),
        Err(error) => return Recompiled::Undecodable(format!("the recipe's id: {error}")),
    };
    let recipe_key =
        StoreKey::for_artifact(&compiler.key_components(), &id, compiler.entry_point(&id));
    if recipe_key.digest() != key.digest() {
        return Recompiled::OtherKey(format!(
            "its object is the artifact of {} (key {}), not of this record's key {}",
            recipe_key.subject_text(),
            &hex(&recipe_key.digest())[..16],
            &hex(&key.digest())[..16]
        ));
    }
    let lowered = match encoding::decode::<C::Lowered>(&recipe.lowered) {
        Ok((lowered, read)) if read == recipe.lowered.len() => lowered,
        Ok(_) => return Recompiled::Undecodable("the recipe's text has bytes left over".into()),
        Err(error) => return Recompiled::Undecodable(format!("the recipe's text: {error}")),
    };
    let finalized = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        compiler.finalize(&id, lowered)
    })) {
        Ok(Ok(finalized)) => finalized,
        Ok(Err(failure)) => return Recompiled::Failed(failure.to_string()),
        Err(payload) => {
            return Recompiled::Failed(format!(
                "the compiler panicked: {}",
                crate::panic::panic_message(payload)
            ));
        }
    };
    match encoding::encode(&finalized.artifact) {
        Ok(bytes) if bytes == value.artifact_bytes => Recompiled::Same,
        Ok(bytes) => Recompiled::Different {
            stored: value.artifact_bytes.len(),
            recompiled: bytes.len(),
        },
        Err(error) => Recompiled::Undecodable(format!("the new artifact: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_without_a_recipe_is_the_artifact_alone() {
        let bytes = encode_value(&vec![1u8, 2, 3], None).expect("encodes");
        assert_eq!(bytes, encoding::encode(&vec![1u8, 2, 3]).expect("encodes"));
        let value = decode_value::<Vec<u8>>(&bytes).expect("decodes");
        assert_eq!(value.artifact, vec![1, 2, 3]);
        assert_eq!(value.recipe, None);
    }

    #[test]
    fn a_recipe_follows_its_artifact_whole_or_the_value_is_refused() {
        let recipe = Recipe {
            id: vec![9; 4],
            lowered: b"text".to_vec(),
        };
        let bytes = encode_value(&vec![1u8, 2, 3], Some(&recipe)).expect("encodes");
        let value = decode_value::<Vec<u8>>(&bytes).expect("decodes");
        assert_eq!(value.recipe.as_ref(), Some(&recipe));
        assert_eq!(
            value.artifact_bytes,
            encoding::encode(&vec![1u8, 2, 3]).expect("encodes")
        );
        assert!(decode_value::<Vec<u8>>(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_value::<Vec<u8>>(&longer).is_err());
    }

    // P2
    #[cfg(feature = "testing")]
    #[test]
    fn a_recipe_of_another_key_than_its_record_s_is_named_not_vouched_for() {
        use crate::fake::{FakeCompiler, FakeKernel};
        use crate::{ArtifactCompiler, KeyedCompiler};
        let compiler = FakeCompiler::default();
        let value_of = |number: u32| {
            let kernel = FakeKernel::new(number);
            let id = kernel.artifact_id();
            let lowered = compiler.lower(&kernel, &id).expect("lowers");
            let recipe = Recipe::of(&id, &lowered).expect("a recipe");
            let finalized = compiler.finalize(&id, lowered).expect("finalizes");
            let key = StoreKey::for_artifact(&compiler.key_components(), &id, None);
            (
                key,
                encode_value(&finalized.artifact, Some(&recipe)).expect("encodes"),
            )
        };
        let (first_key, first_value) = value_of(1);
        let (second_key, _) = value_of(2);
        assert_eq!(
            recompile(&compiler, &first_key, &first_value),
            Recompiled::Same
        );
        // The second kernel's record pointing at the first's object.
        match recompile(&compiler, &second_key, &first_value) {
            Recompiled::OtherKey(what) => {
                assert!(what.contains(&first_key.subject_text()), "{what}");
            }
            other => panic!("a forged record is named: {other:?}"),
        }
    }
}
