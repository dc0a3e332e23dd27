//! Kernels found by their text on a store another tool filled under other
//! names (L11, P7): stored under their own ids together, in one put of the
//! round, and found by id at the next start.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::tests::{load, loader};
use crate::fake::{FakeKernel, FakeTarget};
use crate::statistics::KernelOutcome;
use crate::store::{
    ArtifactStore, Claim, ClaimWait, Claims, Generation, Lookup, MemoryStore, Origin, Put,
    StoreKey, StoreOutcome, StoreParts, StoreStatistics,
};

/// A store in memory that counts how its rekeyed kernels were put.
#[derive(Debug, Default)]
struct CountingPuts {
    inner: MemoryStore,
    /// Puts of several rekeyed kernels together, with how many each
    /// carried.
    many: Mutex<Vec<usize>>,
    /// Puts of one rekeyed kernel alone.
    one_by_one: AtomicUsize,
    /// Claims asked for.
    claims: AtomicUsize,
}

impl ArtifactStore for CountingPuts {
    fn lookup(&self, key: &StoreKey) -> Lookup<Vec<u8>> {
        self.inner.lookup(key)
    }

    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<Lookup<Vec<u8>>> {
        self.inner.lookup_many(keys)
    }

    fn put_many(&self, puts: &[Put<'_>]) -> Vec<StoreOutcome> {
        let rekeyed = puts
            .iter()
            .filter(|put| matches!(put.origin, Origin::Rekeyed { .. }))
            .count();
        match rekeyed {
            0 => {}
            1 if puts.len() == 1 => {
                self.one_by_one.fetch_add(1, Ordering::SeqCst);
            }
            _ => self
                .many
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(rekeyed),
        }
        self.inner.put_many(puts)
    }

    fn remove(&self, key: &StoreKey) {
        self.inner.remove(key);
    }

    fn generation(&self) -> Generation {
        self.inner.generation()
    }

    fn statistics(&self) -> StoreStatistics {
        self.inner.statistics()
    }

    fn parts(&self) -> StoreParts<'_> {
        StoreParts {
            claims: Some(self),
            ..StoreParts::default()
        }
    }
}

impl Claims for CountingPuts {
    fn claim(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(key, wait)
    }
}

/// Kernel `number` of a program, whose text is the `number`th of a
/// folder another tool prebuilt under its own names.
fn program_kernel(number: u32) -> FakeKernel {
    FakeKernel::new(100 + number).sharing_source(format!("text {number}"))
}

/// A store holding the texts `0..count` under another tool's kernel ids,
/// as `kiln warm` leaves it.
fn prebuilt(count: u32) -> Arc<CountingPuts> {
    let store = Arc::new(CountingPuts::default());
    let mut warm = loader(
        FakeTarget::on_store(Arc::clone(&store) as Arc<dyn ArtifactStore>),
        2,
    );
    for number in 0..count {
        warm.enqueue(
            Box::new(FakeKernel::new(number).sharing_source(format!("text {number}"))),
            (),
        );
    }
    warm.compile_queued();
    assert_eq!(
        warm.records()[0].count(KernelOutcome::Compiled),
        count as usize
    );
    store
}

// L11, P7, P14
#[test]
fn l11_kernels_found_by_their_text_are_stored_under_their_ids_in_one_put() {
    let store = prebuilt(8);
    let shared = Arc::clone(&store) as Arc<dyn ArtifactStore>;
    let claims_before = store.claims.load(Ordering::SeqCst);
    let mut program = loader(FakeTarget::on_store(Arc::clone(&shared)), 2);
    for number in 0..8 {
        program.enqueue(Box::new(program_kernel(number)), ());
    }
    program.compile_queued();
    let batch = &program.records()[0];
    assert_eq!(
        batch.count(KernelOutcome::Rekeyed),
        8,
        "each found by its text"
    );
    assert_eq!(batch.count(KernelOutcome::Compiled), 0);
    assert!(
        batch.records.iter().all(|record| record.stored),
        "each stored under its own id: {:?}",
        batch.records
    );
    assert_eq!(program.statistics().stored, 8);
    assert_eq!(
        *store.many.lock().expect("not poisoned"),
        vec![8],
        "one put for the round's eight"
    );
    assert_eq!(
        store.one_by_one.load(Ordering::SeqCst),
        0,
        "none one by one"
    );
    assert_eq!(
        store.claims.load(Ordering::SeqCst),
        claims_before,
        "a kernel found by its text compiles nothing: no claim (P4)"
    );
    for number in 0..8 {
        assert!(
            program
                .target()
                .holds(&program_kernel(number).artifact_id()),
            "kernel {number} is held under its id once its load returned"
        );
    }
    // The next start finds each by its id: nothing lowered, nothing rekeyed.
    let mut next = loader(FakeTarget::on_store(shared), 2);
    for number in 0..8 {
        next.enqueue(Box::new(program_kernel(number)), ());
    }
    next.compile_queued();
    let batch = &next.records()[0];
    assert_eq!(batch.count(KernelOutcome::FromStore), 8);
    assert_eq!(next.target().fake_compiler().lowered(), 0);
}

// L11, L5c, P7
#[test]
fn l11_members_of_a_source_group_are_stored_together_after_their_leader() {
    let store = Arc::new(CountingPuts::default());
    let shared = Arc::clone(&store) as Arc<dyn ArtifactStore>;
    let mut loader = loader(FakeTarget::on_store(Arc::clone(&shared)), 2);
    for number in 0..5 {
        loader.enqueue(
            Box::new(FakeKernel::new(number).sharing_source("one text")),
            (),
        );
    }
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.count(KernelOutcome::Compiled), 1);
    assert_eq!(batch.count(KernelOutcome::Rekeyed), 4);
    assert_eq!(*store.many.lock().expect("not poisoned"), vec![4]);
    assert_eq!(loader.statistics().stored, 5, "the leader and its four");
    for number in 0..5 {
        assert!(
            loader
                .target()
                .holds(&FakeKernel::new(number).artifact_id())
        );
    }
}

// L11, P5
#[test]
fn l11_rekeyed_kernels_a_full_store_cannot_keep_still_load_and_are_counted() {
    let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
    {
        let mut warm = loader(FakeTarget::on_store(Arc::clone(&store)), 2);
        for number in 0..3 {
            load(
                &mut warm,
                &FakeKernel::new(number).sharing_source(format!("text {number}")),
            )
            .expect("loads");
        }
    }
    let mut program = loader(FakeTarget::on_store(store).with_failing_writes(), 2);
    for number in 0..3 {
        program.enqueue(Box::new(program_kernel(number)), ());
    }
    program.compile_queued();
    let batch = &program.records()[0];
    assert_eq!(batch.count(KernelOutcome::Rekeyed), 3);
    assert!(batch.records.iter().all(|record| !record.stored));
    let statistics = program.statistics();
    assert_eq!((statistics.stored, statistics.store_errors), (0, 3));
    for number in 0..3 {
        assert!(program.is_loaded(&program_kernel(number).artifact_id()));
    }
}

// L11, F11: a program whose every kernel is found by its text compiles
// nothing, so its round is a warm start's: on a driver that serializes its
// device objects, each is made on the loader's thread, and no failure
// memory is asked for a kernel that has an artifact.
#[test]
fn l11_a_round_found_by_texts_makes_its_device_objects_where_a_warm_start_does() {
    let store = prebuilt(6);
    let shared = Arc::clone(&store) as Arc<dyn ArtifactStore>;
    let target = FakeTarget::on_store(shared)
        .with_device_time(Duration::from_millis(20))
        .with_serialized_device();
    let mut program = loader(target, 2);
    for number in 0..6 {
        program.enqueue(Box::new(program_kernel(number)), ());
    }
    program.compile_queued();
    assert_eq!(program.records()[0].count(KernelOutcome::Rekeyed), 6);
    let step = program.target().fake_device_step();
    assert_eq!(step.made(), 6);
    assert_eq!(
        step.threads(),
        std::iter::once(std::thread::current().id()).collect(),
        "every one made on the loader's thread"
    );
    assert_eq!(step.most_at_once(), 1);
}
