//! L2, measured: a load of a loaded kernel with nothing queued allocates
//! nothing; R1: neither does `load_or` of a loaded kernel, nor its answer
//! with the fallback while the kernel waits for its background batch. A
//! counting allocator sees every allocation of the calling thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use kiln_engine::fake::{FakeKernel, FakeTarget};
use kiln_engine::{KernelLoader, LoaderConfig};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract for `realloc` is passed on as it is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// L2
#[test]
fn a_hot_load_allocates_nothing() {
    for target in [FakeTarget::storeless(), FakeTarget::persisting()] {
        let mut loader = KernelLoader::with_config(target, LoaderConfig::default());
        let kernels: Vec<FakeKernel> = (0..1_000).map(FakeKernel::new).collect();
        let ids: Vec<_> = kernels.iter().map(FakeKernel::artifact_id).collect();
        for kernel in &kernels {
            loader.enqueue(Box::new(kernel.clone()), ());
        }
        loader.compile_queued();

        let before = allocations();
        for _ in 0..10 {
            for (kernel, id) in kernels.iter().zip(&ids) {
                let loaded = loader.load(kernel, id).expect("every kernel loaded");
                std::hint::black_box(loaded);
            }
        }
        assert_eq!(allocations() - before, 0, "10,000 hot loads allocated");
    }
}

// R1
#[test]
fn r1_load_or_of_a_loaded_kernel_or_of_its_fallback_allocates_nothing() {
    let mut loader = KernelLoader::with_config(
        FakeTarget::storeless(),
        LoaderConfig {
            profile: false,
            ..LoaderConfig::default()
        },
    );
    let fallback = FakeKernel::new(0);
    let fallback_id = fallback.artifact_id();
    let kernels: Vec<FakeKernel> = (1..=100).map(FakeKernel::new).collect();
    let ids: Vec<_> = kernels.iter().map(FakeKernel::artifact_id).collect();
    loader.enqueue(Box::new(fallback.clone()), ());
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), ());
    }
    loader.compile_queued();

    let before = allocations();
    for _ in 0..10 {
        for (kernel, id) in kernels.iter().zip(&ids) {
            let loaded = loader
                .load_or(kernel, id, &fallback_id)
                .expect("every kernel loaded");
            std::hint::black_box(loaded);
        }
    }
    assert_eq!(allocations() - before, 0, "1,000 hot loads allocated");

    // A kernel waiting for its background batch: the first miss queues it,
    // and every answer after it is the fallback, allocating nothing.
    let slow = FakeKernel::new(500).sleeping(Duration::from_millis(500));
    let slow_id = slow.artifact_id();
    let first = loader
        .load_or(&slow, &slow_id, &fallback_id)
        .expect("fallback");
    assert_eq!(first.kernel, fallback_id.kernel);
    let before = allocations();
    for _ in 0..1_000 {
        let served = loader
            .load_or(&slow, &slow_id, &fallback_id)
            .expect("fallback");
        std::hint::black_box(served);
    }
    let fallback_allocations = allocations() - before;
    assert!(loader.wait_for_background(Duration::from_secs(30)));
    assert_eq!(fallback_allocations, 0, "1,000 fallback answers allocated");
    assert_eq!(
        loader
            .load_or(&slow, &slow_id, &fallback_id)
            .expect("loaded")
            .kernel,
        slow_id.kernel
    );
}
