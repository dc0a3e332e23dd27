//! The compiler's identity in keys against the real NVRTC library file:
//! NVRTC reports only `major.minor`, so the key names the digest of the
//! library loaded, and a patch release (another file, the same version) is
//! another compiler (P1).

mod support;

use std::io::Write;
use std::time::Instant;

use kiln_cuda::{CudaKey, CudaVariant};
use kiln_engine::store::LibraryFile;
use kiln_engine::{ArtifactId, CompilationTarget, KernelId, StoreKey};
use support::{ARCHITECTURE, Scratch, compile_only};

/// The store key of one kernel by a compiler whose NVRTC is `library`.
fn key_with(target: &kiln_cuda::CudaTarget, library: &LibraryFile) -> StoreKey {
    let components = CudaKey::for_store(target.compiler().version(), library, Some(ARCHITECTURE));
    let id = ArtifactId::new(
        KernelId::named("tests.identity").build(),
        CudaVariant {
            architecture: ARCHITECTURE,
        },
    );
    StoreKey::for_artifact(&components, &id, None)
}

// P1
#[test]
fn p1_another_nvrtc_library_file_with_the_same_version_gives_another_key() {
    let Some(target) = compile_only("P1 compiler identity") else {
        return;
    };
    let loaded = kiln_cuda::library::nvrtc()
        .expect("NVRTC is open")
        .file()
        .expect("the dynamic linker names NVRTC's file")
        .to_path_buf();

    let started = Instant::now();
    let real = LibraryFile::read(&loaded).expect("the loaded library reads");
    let bytes = std::fs::metadata(&loaded).map_or(0, |found| found.len());
    // Printed, not asserted: timings belong in benchmarks.
    println!(
        "reading and digesting {} ({} MB) took {:?}",
        loaded.display(),
        bytes >> 20,
        started.elapsed()
    );
    assert_eq!(
        target.compiler().library_file(),
        &real,
        "the compiler names the file the dynamic linker loaded"
    );

    let scratch = Scratch::new("compiler-identity");
    let copy = scratch.folder("copy").join(real.name.as_str());
    std::fs::copy(&loaded, &copy).expect("a copy of NVRTC");
    let patched = scratch.folder("patched").join(real.name.as_str());
    std::fs::copy(&loaded, &patched).expect("a copy of NVRTC");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&patched)
        .and_then(|mut file| file.write_all(&[0]))
        .expect("one byte appended");

    let copied = LibraryFile::read(&copy).expect("the copy reads");
    let other = LibraryFile::read(&patched).expect("the patched copy reads");
    assert_eq!(copied, real, "a copy keeps the bytes, so the identity");
    assert_eq!(
        key_with(&target, &copied).digest(),
        key_with(&target, &real).digest(),
        "the same bytes, the same key"
    );
    assert_eq!(
        key_with(&target, &real).digest(),
        key_with(&target, &LibraryFile::read(&loaded).expect("reads")).digest(),
        "the same file, the same key"
    );
    assert_eq!(other.name, real.name, "the same file name");
    let patched_key = key_with(&target, &other);
    let real_key = key_with(&target, &real);
    assert_ne!(patched_key.digest(), real_key.digest());
    assert_eq!(
        real_key
            .first_difference(&patched_key)
            .map(|difference| difference.component),
        Some(kiln_engine::KeyComponent::Compiler),
        "a miss explains itself by the compiler"
    );
}
