//! The conformance suite: the loader's rules (L), statistics (S),
//! diagnostics (D) and the shared handle's rules (K), proved against any
//! [`CompilationTarget`]. Each rule is a function of this module named as
//! a sentence; the loader's (L, S, D2) are written in `loader`, the shared
//! handle's (K, D3) in `cache`. The store's rules (P), proved against any
//! [`ArtifactStore`](crate::ArtifactStore) through its trait alone, are
//! written in `store` and instantiated with
//! [`store_conformance_suite!`](crate::store_conformance_suite).
//!
//! Every backend runs the same checks against its real compiler, so a rule
//! holds on every backend or the backend's tests fail. A backend describes
//! how to make its kernels with a [`ConformanceSubject`] and instantiates
//! the suite with [`conformance_suite!`](crate::conformance_suite):
//!
//! ```
//! # mod example {
//! use kiln_engine::conformance::ConformanceSubject;
//! use kiln_engine::fake::{FakeKernel, FakeTarget};
//!
//! struct FakeSubject;
//!
//! impl ConformanceSubject for FakeSubject {
//!     type Target = FakeTarget;
//!     fn target(&self) -> FakeTarget { FakeTarget::persisting() }
//!     fn variant(&self) {}
//!     fn distinct(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(index as u32))
//!     }
//!     fn sharing_source(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(1000 + index as u32).sharing_source("shared"))
//!     }
//!     fn failing(&self, index: usize) -> Box<FakeKernel> {
//!         Box::new(FakeKernel::new(2000 + index as u32).failing())
//!     }
//! }
//!
//! // In a test module: one `#[test]` per rule.
//! kiln_engine::conformance_suite!(Ok::<_, String>(FakeSubject));
//! # }
//! ```
//!
//! A subject that needs hardware returns `Err(reason)` when it is missing:
//! each test then prints that it skipped and why, or fails when
//! `KILN_REQUIRE_DEVICE=1`.

mod cache;
mod loader;
mod store;

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::LoaderConfig;
use crate::target::{CompilationTarget, KernelOf, VariantOf};

pub use cache::{
    d3_a_reporter_hears_each_built_artifact_once, d3_a_reporter_replaces_itself_from_inside,
    k1_requests_compile_nothing_until_one_batch_builds_them_all, k2_a_request_is_not_added_twice,
    k2_requests_made_during_a_build_survive_it,
    k3_a_failed_request_stays_wanted_and_resolves_to_its_own_failure,
    k4_a_concurrent_build_waits_for_the_batch_in_flight_then_retries_its_failure,
    k5_a_keyed_hit_runs_no_factory_and_a_failure_is_not_indexed, k6_a_cache_refuses_another_device,
};
pub use loader::{
    d2_a_failure_leads_with_its_first_error, l1_a_failure_queued_again_is_retried,
    l1_queuing_compiles_nothing, l2_a_loaded_kernel_is_served_without_a_batch,
    l3_a_load_compiles_the_whole_queue_in_one_batch, l3_a_loaded_kernel_still_compiles_the_queue,
    l4_compile_queued_leaves_one_lookup, l5_a_batch_runs_on_several_workers,
    l5_a_stored_kernel_is_not_compiled_again, l5_kernels_sharing_a_source_share_one_artifact,
    l6_a_failure_fails_alone, l7_a_failure_is_reported_once_then_retried,
    l7_a_stale_failure_compiles_again, l8_a_panic_fails_only_its_kernel,
    l9_a_refused_kernel_is_neither_kept_nor_stored, l10_a_store_switch_reloads,
    p11_a_failure_is_remembered_and_reported_without_compiling,
    s1_a_collector_counts_what_registered_in_its_scope, s1_a_dropped_queue_is_abandoned,
    s3_records_hold_outcomes_and_work, s4_statistics_add_up,
};
pub use store::{
    StoreSubject, l10_the_generation_is_shared_by_clones_and_moves_only_when_content_is_replaced,
    p1_keys_differing_in_one_component_do_not_see_each_other, p2_a_key_never_put_misses_as_absent,
    p2_a_named_blob_is_found_by_its_own_key_only, p2_a_put_of_another_artifact_replaces_the_first,
    p2_a_put_then_a_lookup_hits_with_the_same_bytes_and_work,
    p2_a_removed_key_misses_and_removing_it_again_is_harmless,
    p3_another_process_reads_what_one_put, p3_copies_put_together_are_each_found_whole,
    p3_puts_of_every_origin_together_are_each_answered_in_order,
    p3_threads_putting_under_one_key_are_read_whole,
    p4_a_claim_held_in_one_process_is_busy_in_another,
    p4_a_held_claim_is_busy_for_a_second_once_claimant_and_free_after_its_guard_drops,
    p4_a_patient_claimant_holds_the_key_once_the_guard_drops,
    p5_an_empty_artifact_round_trips_or_is_refused_and_counted,
    p6_a_batch_end_within_the_limits_keeps_every_entry, p7_a_source_key_finds_what_was_put_with_it,
    p7_kernels_put_rekeyed_together_are_each_found_by_their_key,
    p9_explain_names_the_changed_component_or_says_never_seen,
    p10_a_lookup_of_many_keys_answers_each_in_order,
    p12_a_released_unpublished_key_is_claimable_by_the_next_claimant,
    p12_an_expired_lease_is_claimable_by_one_other_claimant,
    s4_statistics_count_hits_misses_and_puts,
};

/// How the suite makes kernels for one backend.
pub trait ConformanceSubject {
    /// The target under test. It is `Send`, and so are its loaded kernels,
    /// because the shared [`KernelCache`](crate::KernelCache) builds on whichever thread asks
    /// first and hands loaded kernels to every thread (the K rules).
    type Target: CompilationTarget<Loaded: Send + Sync> + Send;

    /// A fresh target: its store, if it has one, holds nothing.
    fn target(&self) -> Self::Target;

    /// The variant kernels are compiled under.
    fn variant(&self) -> VariantOf<Self::Target>;

    /// A valid kernel; different indices give different ids and different
    /// source text.
    fn distinct(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// A valid kernel; different indices give different ids and identical
    /// source text.
    fn sharing_source(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// A valid kernel like [`distinct`](Self::distinct) whose lowering or
    /// compile lasts tens of milliseconds (a generator that takes its
    /// time, counted by an [`Overlap`]): long enough that kernels worked on
    /// at once overlap, whatever the compiler's speed (L5). The default is
    /// `distinct(index)`.
    fn lasting(&self, index: usize) -> Box<KernelOf<Self::Target>> {
        self.distinct(index)
    }

    /// The most [`lasting`](Self::lasting) kernels that were being lowered
    /// or compiled at the same moment on `target`, as the subject counted
    /// them (an [`Overlap`] its generators run in, or the fake compiler's
    /// own count); `None` when it cannot tell, and the suite then measures
    /// overlap from the batch's records alone.
    fn most_at_once(&self, target: &Self::Target) -> Option<usize> {
        let _ = target;
        None
    }

    /// A kernel whose source fails to compile with located errors;
    /// different indices give different ids.
    fn failing(&self, index: usize) -> Box<KernelOf<Self::Target>>;

    /// Whether the errors of [`failing`](Self::failing) have a line: `false`
    /// for a binary source such as a SPIR-V module, which has none (D2 says
    /// "when known").
    fn failures_have_lines(&self) -> bool {
        true
    }

    /// A kernel whose generator panics, if the backend's kernels run user
    /// generators.
    fn panicking(&self, _index: usize) -> Option<Box<KernelOf<Self::Target>>> {
        None
    }

    /// A kernel that compiles and that the device refuses, if the backend
    /// can make one.
    fn refused(&self, _index: usize) -> Option<Box<KernelOf<Self::Target>>> {
        None
    }

    /// Switches `target` to another store, as opening another root does;
    /// `false` when the target cannot.
    fn switch_store(&self, _target: &mut Self::Target) -> bool {
        false
    }
}

/// Counts how many pieces of work run at the same moment, on any threads:
/// what a subject's [`lasting`](ConformanceSubject::lasting) kernels run
/// their generators in, so that the suite sees the workers a batch really
/// used rather than the number it planned (L5).
#[derive(Debug, Default)]
pub struct Overlap {
    running: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    /// Runs `work` as one of the pieces counted.
    pub fn during<R>(&self, work: impl FnOnce() -> R) -> R {
        struct Running<'a>(&'a AtomicUsize);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        // Counted down even when `work` panics, so a panicking generator
        // cannot inflate the count of a later one.
        let _running = Running(&self.running);
        work()
    }

    /// The most pieces that ran at the same moment so far.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// The subject, or `None` after printing why the suite skips; panics instead
/// when `KILN_REQUIRE_DEVICE=1`.
pub fn available<S>(subject: Result<S, String>) -> Option<S> {
    match subject {
        Ok(subject) => Some(subject),
        Err(reason) => {
            skip("the conformance suite", &reason);
            None
        }
    }
}

/// Prints that `what` is skipped and why, or panics when
/// `KILN_REQUIRE_DEVICE=1` asks for every test to run.
///
/// The line goes straight to the process's standard error rather than
/// through `eprintln!`, which the test harness captures and shows only for
/// failing tests: a skip must be visible in every log, passing runs too.
pub fn skip(what: &str, reason: &str) {
    if std::env::var("KILN_REQUIRE_DEVICE").is_ok_and(|value| value == "1") {
        panic!("{what} cannot run and KILN_REQUIRE_DEVICE=1: {reason}");
    }
    say(&format!("skipped {what}: {reason}"));
}

/// Prints that `rule` does not apply to this subject and why. Unlike
/// [`skip`], this is no missing hardware: a storeless target has no store
/// hits to prove, whatever machine runs it, so it never fails the run.
fn not_applicable(rule: &str, reason: &str) {
    say(&format!("{rule} does not apply here: {reason}"));
}

/// Writes one line to standard error, past the test harness's capture.
fn say(line: &str) {
    use std::io::Write;
    // A closed standard error leaves nowhere to say it: nothing to do.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The settings of every loader and cache the suite makes: four workers,
/// so that a batch of several kernels runs on several.
fn config() -> LoaderConfig {
    LoaderConfig {
        parallelism: NonZeroUsize::new(4).expect("4 is not zero"),
        // A loader after `into_target` stands in for the next process: no
        // warm-start profile loads ahead of what the rules count.
        profile: false,
        ..LoaderConfig::default()
    }
}

/// Instantiates the conformance suite: one `#[test]` per rule, each making
/// its subject with `$subject`, an expression of type
/// `Result<impl ConformanceSubject, String>` (`Err` says why the suite
/// cannot run here).
#[macro_export]
macro_rules! conformance_suite {
    ($subject:expr) => {
        $crate::conformance_suite!(@tests $subject;
            l1_queuing_compiles_nothing,
            l1_a_failure_queued_again_is_retried,
            l2_a_loaded_kernel_is_served_without_a_batch,
            l3_a_load_compiles_the_whole_queue_in_one_batch,
            l3_a_loaded_kernel_still_compiles_the_queue,
            l4_compile_queued_leaves_one_lookup,
            l5_a_batch_runs_on_several_workers,
            l5_kernels_sharing_a_source_share_one_artifact,
            l5_a_stored_kernel_is_not_compiled_again,
            l6_a_failure_fails_alone,
            l7_a_failure_is_reported_once_then_retried,
            l7_a_stale_failure_compiles_again,
            l8_a_panic_fails_only_its_kernel,
            l9_a_refused_kernel_is_neither_kept_nor_stored,
            l10_a_store_switch_reloads,
            s1_a_collector_counts_what_registered_in_its_scope,
            s1_a_dropped_queue_is_abandoned,
            s3_records_hold_outcomes_and_work,
            s4_statistics_add_up,
            d2_a_failure_leads_with_its_first_error,
            p11_a_failure_is_remembered_and_reported_without_compiling,
            d3_a_reporter_hears_each_built_artifact_once,
            d3_a_reporter_replaces_itself_from_inside,
            k1_requests_compile_nothing_until_one_batch_builds_them_all,
            k2_a_request_is_not_added_twice,
            k2_requests_made_during_a_build_survive_it,
            k3_a_failed_request_stays_wanted_and_resolves_to_its_own_failure,
            k4_a_concurrent_build_waits_for_the_batch_in_flight_then_retries_its_failure,
            k5_a_keyed_hit_runs_no_factory_and_a_failure_is_not_indexed,
            k6_a_cache_refuses_another_device,
        );
    };
    (@tests $subject:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                if let Some(subject) = $crate::conformance::available($subject) {
                    $crate::conformance::$rule(&subject);
                }
            }
        )*
    };
}
