//! Untrusted shaders in a bounded place: SPIR-V modules that panic naga's
//! front end (seeded mutants of kiln-spirv-kernels' modules, found by
//! [`mutant`] and kept as fixtures) fail their own kernel with a message,
//! beside good kernels that load; a thousand more mutants never take the
//! process down; and listing a module's entries reads no module with naga.

mod support;

use kiln_engine::{ArtifactCompiler, CompilationTarget, KernelLoader};
use kiln_wgpu::{WgpuTarget, WgslKernel, spirv_compute_entries};

/// Mutants of kiln-spirv-kernels' modules that panic naga 30's SPIR-V
/// front end, each at another place: a layout it unwraps (`TooLarge`), an
/// index past the end of a list, a switch selector it does not implement.
const PANICKING: &[(&str, &[u8])] = &[
    (
        "naga_panics_too_large.spv",
        include_bytes!("fixtures/naga_panics_too_large.spv"),
    ),
    (
        "naga_panics_out_of_bounds.spv",
        include_bytes!("fixtures/naga_panics_out_of_bounds.spv"),
    ),
    (
        "naga_panics_selector.spv",
        include_bytes!("fixtures/naga_panics_selector.spv"),
    ),
];

/// A seeded mutant of `module`: one to four of its words (past the
/// header) flipped, replaced, nudged, copied from elsewhere, or given
/// another word count. The same seed gives the same mutant.
fn mutant(module: &[u8], seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut words: Vec<u32> = module
        .chunks_exact(4)
        .map(|word| u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
        .collect();
    let body = words.len() - 5;
    for _ in 0..=next() % 4 {
        let at = 5 + usize::try_from(next()).unwrap_or(0) % body;
        words[at] = match next() % 7 {
            0 => words[at] ^ (1 << (next() % 32)),
            1 => [0, 1, 2, u32::MAX, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF, 64]
                [usize::try_from(next() % 8).unwrap_or(0)],
            2 => next() as u32,
            3 => words[at].wrapping_add((next() % 7) as u32).wrapping_sub(3),
            4 => words[5 + usize::try_from(next()).unwrap_or(0) % body],
            _ => words[at].wrapping_add(((next() % 5) as u32).wrapping_sub(2) << 16),
        };
    }
    words.iter().flat_map(|word| word.to_le_bytes()).collect()
}

/// The kernel of `bytes`' entry `main`, labelled `label`.
fn kernel(label: &str, bytes: &[u8]) -> WgslKernel {
    support::spirv_kernel(bytes, label, "main", &[])
}

// L9, B7: a module that panics naga fails its own kernel with naga's
// message; a good module in the same batch loads.
#[test]
fn b7_a_module_that_panics_naga_fails_alone_beside_good_kernels() {
    let Some(good) = support::spirv("panicking SPIR-V beside good kernels", "scale_bias") else {
        return;
    };
    let mut loader = KernelLoader::new(WgpuTarget::compile_only().without_store());
    for (label, bytes) in PANICKING {
        loader.enqueue(Box::new(kernel(label, bytes)), kiln_wgpu::WgpuVariant);
    }
    let good = kernel("scale_bias.spv", good);
    loader
        .load(&good, &support::id_of(&good))
        .expect("the good module loads beside the panicking ones");
    for (label, bytes) in PANICKING {
        let bad = kernel(label, bytes);
        let error = loader
            .load(&bad, &support::id_of(&bad))
            .expect_err("naga panics on it");
        let text = error.to_string();
        assert!(
            text.contains(label) && text.contains("naga panicked"),
            "{label}: {text}"
        );
    }
}

// B7: listing a module's entries never hands it to naga: a module that
// panics naga lists its entry (or is refused where its own instructions
// do not hold together), and bytes that are no module are refused.
#[test]
fn b7_listing_entries_reads_no_module_with_naga() {
    for (label, bytes) in PANICKING {
        match spirv_compute_entries(bytes) {
            Ok(entries) => assert_eq!(entries, ["main"], "{label}"),
            Err(failure) => assert!(failure.to_string().contains("words"), "{failure}"),
        }
    }
    let listed = spirv_compute_entries(PANICKING[0].1).expect("the first lists its entry");
    assert_eq!(listed, ["main"]);
    let mut cut = PANICKING[0].1.to_vec();
    // An instruction whose word count runs past the end.
    let last = cut.len() - 4;
    cut[last + 2] = 0xff;
    cut[last + 3] = 0x7f;
    assert!(spirv_compute_entries(&cut).is_err());
}

// B7: 1,000 seeded mutants of the test modules each lower and finalize to
// an artifact or a failure: none takes the process down.
#[test]
fn b7_a_thousand_mutants_each_end_as_an_artifact_or_a_failure() {
    let Some(modules) = ["scale_bias", "saxpy", "reduce_sum", "passes"]
        .iter()
        .map(|name| support::spirv("SPIR-V mutants", name))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let target = WgpuTarget::compile_only().without_store();
    let (mut built, mut failed, mut panicked) = (0, 0, 0);
    for seed in 0..1000u64 {
        let module = modules[usize::try_from(seed).unwrap_or(0) % modules.len()];
        let bytes = mutant(module, seed);
        // Listing never panics either.
        let _ = spirv_compute_entries(&bytes);
        let kernel = kernel(&format!("mutant-{seed}.spv"), &bytes);
        let id = support::id_of(&kernel);
        let lowered = target.compiler().lower(&kernel, &id).expect("lowering");
        match target.compiler().finalize(&id, lowered) {
            Ok(_) => built += 1,
            Err(failure) if failure.to_string().contains("naga panicked") => panicked += 1,
            Err(_) => failed += 1,
        }
    }
    println!("1000 mutants: {built} built, {failed} refused, {panicked} panicked naga");
    assert_eq!(built + failed + panicked, 1000);
}
