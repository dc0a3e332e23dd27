//! The store read while the device's context is made (F5, F11): making a
//! CUDA context takes 130–220 ms on a data-centre GPU, and the driver can
//! say which architecture the GPU is before it (`CxxBackend::
//! device_architecture`). Knowing it, `kiln warm` makes its kernels, asks
//! the store for every one and, when some are missing, starts the compile
//! workers, all on a thread of its own beside the context. The batch then
//! takes the answers from memory ([`Ahead`], a store before the store) and
//! its warm start is the device loads alone; a cold batch finds its
//! workers started.
//!
//! What was read ahead is the store's verified answer to the same key:
//! the batch asks with the keys its own target makes, and a key read for
//! nothing (a target keyed otherwise) is asked of the store as before.

use std::sync::{Arc, Mutex};

use kiln_engine::store::{BoundStore, Lookup, Put, StoreKey, StoreOutcome, StoreParts};
use kiln_engine::{
    ArtifactId, ArtifactStore, CompilationTarget, Generation, StoreStatistics, VariantOf,
};

/// Hits read ahead, each answered once.
type Hits = std::collections::HashMap<StoreKey, Lookup<Vec<u8>>>;

/// A store before `inner` answering the keys read ahead from memory, once
/// each, and everything else as `inner` does.
#[derive(Debug)]
pub struct Ahead {
    inner: Arc<dyn ArtifactStore>,
    hits: Mutex<Hits>,
}

impl Ahead {
    /// Looks up each of `ids` of `target`'s compiler in `store`, now, and
    /// keeps the hits for the batch; the number of misses.
    pub fn read<T: CompilationTarget>(
        store: Arc<dyn ArtifactStore>,
        target: &T,
        ids: &[ArtifactId<VariantOf<T>>],
    ) -> (Self, usize) {
        let compiler = target.compiler();
        let bound = BoundStore::new(Arc::clone(&store), &**compiler);
        let keys: Vec<StoreKey> = ids
            .iter()
            .map(|id| bound.artifact_key(compiler, id))
            .collect();
        let mut hits = Hits::default();
        let mut missing = 0;
        store.lookup_each(&keys, &mut |at, found| match found {
            Lookup::Hit { .. } => {
                hits.insert(keys[at].clone(), found);
            }
            Lookup::Miss(_) => missing += 1,
        });
        let ahead = Self {
            inner: store,
            hits: Mutex::new(hits),
        };
        (ahead, missing)
    }

    /// How many hits read ahead no lookup has taken yet.
    pub fn untaken(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hits> {
        self.hits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ArtifactStore for Ahead {
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        let mut answers: Vec<Option<Lookup<Vec<u8>>>> = keys.iter().map(|_| None).collect();
        self.lookup_each(keys, &mut |at, found| answers[at] = Some(found));
        answers
            .into_iter()
            .map(|answer| answer.expect("every key is answered"))
            .collect()
    }

    fn lookup_each(&self, keys: &[StoreKey], found: &mut dyn FnMut(usize, Lookup<Vec<u8>>)) {
        let mut rest = Vec::new();
        let mut places = Vec::new();
        {
            let mut hits = self.lock();
            for (at, key) in keys.iter().enumerate() {
                match hits.remove(key) {
                    Some(hit) => found(at, hit),
                    None => {
                        rest.push(key.clone());
                        places.push(at);
                    }
                }
            }
        }
        if !rest.is_empty() {
            self.inner
                .lookup_each(&rest, &mut |at, answer| found(places[at], answer));
        }
    }

    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        match self.lock().remove(key) {
            Some(hit) => hit,
            None => self.inner.lookup(key),
        }
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        self.inner.put_many(puts)
    }

    fn remove(&self, key: &StoreKey) {
        self.lock().remove(key);
        self.inner.remove(key);
    }

    fn generation(&self) -> Generation {
        self.inner.generation()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.statistics()
    }

    fn parts(&self) -> StoreParts<'_> {
        self.inner.parts()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use kiln_engine::fake::{FakeKernel, FakeTarget};
    use kiln_engine::store::{BoundStore, Lookup, StoreKey};
    use kiln_engine::{ArtifactStore, ArtifactStoreExt, CompilationTarget, MemoryStore};

    use super::Ahead;

    // F11: what was read ahead is answered from memory, once, at its
    // place; every other key is the store's answer.
    #[test]
    fn f11_what_was_read_ahead_is_answered_once_from_memory_and_the_rest_by_the_store() {
        let inner: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let target = FakeTarget::storeless();
        let ids: Vec<_> = (0..3)
            .map(|number| FakeKernel::new(number).artifact_id())
            .collect();
        let bound = BoundStore::new(Arc::clone(&inner), &**target.compiler());
        let keys: Vec<StoreKey> = ids
            .iter()
            .map(|id| bound.artifact_key(target.compiler(), id))
            .collect();
        inner.put(&keys[0], None, b"zero", Duration::ZERO);
        inner.put(&keys[1], None, b"one", Duration::ZERO);

        let (ahead, missing) = Ahead::read(Arc::clone(&inner), &target, &ids);
        assert_eq!((missing, ahead.untaken()), (1, 2));
        // Gone from the store since: the answer read ahead still serves.
        inner.remove(&keys[0]);

        let mut answers: Vec<Option<Lookup<Vec<u8>>>> = vec![None, None, None];
        ahead.lookup_each(&keys, &mut |at, found| {
            assert!(
                answers[at].replace(found).is_none(),
                "key {at} answered twice"
            );
        });
        let bytes: Vec<Option<Vec<u8>>> = answers
            .into_iter()
            .map(|answer| match answer.expect("every key answered") {
                Lookup::Hit { artifact, .. } => Some(artifact),
                Lookup::Miss(_) => None,
            })
            .collect();
        assert_eq!(bytes, [Some(b"zero".to_vec()), Some(b"one".to_vec()), None]);
        assert_eq!(ahead.untaken(), 0);
        // Answered once: asked again, the store answers.
        assert!(matches!(ahead.lookup(&keys[0]), Lookup::Miss(_)));
        assert!(matches!(ahead.lookup(&keys[1]), Lookup::Hit { .. }));
    }
}
