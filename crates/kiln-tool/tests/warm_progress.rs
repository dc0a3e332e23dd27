//! `kiln warm`'s progress counts the kernels that are done (loaded or
//! failed), never the ones merely started: through the real binary and
//! real NVRTC, a kernel that takes NVRTC seconds holds the count below the
//! total while it compiles. `--progress plain` prints the count as lines,
//! which is what a terminal's bar shows, without a terminal.

mod support;

use kiln_test_support::require::skip_unless;
use support::kernels::{cxx_kernel, slow_kernel, write_kernel};
use support::{Scratch, backend, kiln};

/// The `settled/total` counts of `--progress plain`'s lines in `stderr`.
fn counts(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix("warm cuda: "))
        .filter_map(|rest| rest.split_once(" kernels settled"))
        .filter_map(|(count, _)| count.split_once('/'))
        .map(|(done, total)| {
            (
                done.parse().expect("a count"),
                total.parse().expect("a total"),
            )
        })
        .collect()
}

// A kernel from the store is done at once; the one that compiles is done
// only when NVRTC is: the count stays at 1 of 2 for as long as it takes,
// where counting generated sources showed 2 of 2 from the start.
#[test]
fn the_progress_counts_finished_kernels_not_started_ones() {
    let scratch = Scratch::new("warm-progress");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    write_kernel(
        &folder,
        "fast.cu",
        cxx_kernel("fast", "x[threadIdx.x] *= 2.0f;"),
    );
    let first = support::finish(
        kiln(
            &store,
            &["--json", "warm", "--backend", "cuda", "--progress", "never"],
        )
        .arg(&folder),
    );
    let report = first.json();
    let cuda = backend(&report, "cuda");
    if let Some(reason) = cuda["unavailable"].as_str() {
        skip_unless(&["KILN_REQUIRE_NVRTC"], "progress of a CUDA batch", reason);
        return;
    }
    assert!(
        first
            .stderr
            .lines()
            .all(|line| !line.starts_with("warm cuda:")),
        "--progress never prints no count: {}",
        first.stderr
    );
    write_kernel(&folder, "slow.cu", slow_kernel());
    let second = support::finish(
        kiln(
            &store,
            &["--json", "warm", "--backend", "cuda", "--progress", "plain"],
        )
        .arg(&folder),
    );
    let report = second.succeeded_json();
    let cuda = backend(&report, "cuda");
    assert_eq!(
        (cuda["from_store"].as_u64(), cuda["compiled"].as_u64()),
        (Some(1), Some(1))
    );
    let counts = counts(&second.stderr);
    assert!(
        counts.first().is_some_and(|(done, total)| done < total),
        "it starts below the total: {}",
        second.stderr
    );
    assert_eq!(
        counts.last(),
        Some(&(2, 2)),
        "it ends at all done: {}",
        second.stderr
    );
    assert!(
        counts.contains(&(1, 2)),
        "while the slow kernel compiles, one of two is done: {}",
        second.stderr
    );
    assert!(
        counts.windows(2).all(|pair| pair[0].0 <= pair[1].0),
        "the count never goes back: {counts:?}"
    );
    let line = second
        .stderr
        .lines()
        .find(|line| line.starts_with("warm cuda: 1/2"))
        .expect("the line of one done");
    assert!(
        line.contains("/s") && line.contains("ETA"),
        "rate and time left: {line}"
    );
}

// Without a terminal and without `--progress plain`, nothing of the bar
// reaches standard error.
#[test]
fn the_bar_is_hidden_when_standard_error_is_no_terminal() {
    let scratch = Scratch::new("warm-progress-hidden");
    let folder = scratch.folder("kernels");
    let store = scratch.path().join("store");
    std::fs::write(
        folder.join("a.wgsl"),
        format!("// kiln entry: main\n{}", support::wgsl_kernel(1)),
    )
    .expect("a kernel file");
    let run = support::finish(kiln(&store, &["warm"]).arg(&folder));
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        !run.stderr.contains("warm wgpu:") && !run.stderr.contains('\r'),
        "no bar on a pipe: {:?}",
        run.stderr
    );
}
