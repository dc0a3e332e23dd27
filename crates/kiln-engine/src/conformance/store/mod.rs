//! The store's rules (P), each proved against an [`ArtifactStore`] made by a
//! [`StoreSubject`], through the trait alone: what its `# Contract` promises
//! every store, whatever holds the bytes, and what each of its parts
//! ([`Claims`](crate::store::Claims), [`Blobs`](crate::store::Blobs),
//! [`Records`](crate::store::Records), [`Groups`](crate::store::Groups))
//! promises every store that has it, reached through
//! [`ArtifactStore::parts`] as a loader reaches it. The contract's rules
//! (`puts`, `bookkeeping`) run for every store; a part's rules (`claims`,
//! `blobs`, `records`, `groups`) for every store that has the part, and say
//! they do not apply to one that has not. A composition (a tier in front of
//! another) runs them all, each part as it composes it.
//!
//! A store instantiates the suite with
//! [`store_conformance_suite!`](crate::store_conformance_suite):
//!
//! ```
//! # mod example {
//! use kiln_engine::MemoryStore;
//! use kiln_engine::conformance::StoreSubject;
//!
//! struct Memory;
//!
//! impl StoreSubject for Memory {
//!     type Store = MemoryStore;
//!     fn store(&self) -> MemoryStore { MemoryStore::new() }
//!     fn replace_content(&self, store: &MemoryStore) -> bool {
//!         store.clear();
//!         true
//!     }
//! }
//!
//! // In a test module: one `#[test]` per rule.
//! kiln_engine::store_conformance_suite!(Memory);
//! # }
//! ```
//!
//! A rule that a store cannot show (a store of one process has no other
//! process to coordinate with) prints why it does not apply and passes.

use std::time::Duration;

use super::not_applicable;
use crate::id::{ArtifactId, KernelId};
use crate::store::{
    ArtifactStore, ArtifactStoreExt, BlobKey, Claim, ClaimWait, Explanation, KeyComponent,
    KeyComponents, Lookup, Miss, Origin, Put, StoreKey, StoreOutcome,
};

mod blobs;
mod bookkeeping;
mod claims;
mod groups;
mod puts;
mod records;

pub use blobs::*;
pub use bookkeeping::*;
pub use claims::*;
pub use groups::*;
pub use puts::*;
pub use records::*;

/// How the suite makes stores of one kind.
pub trait StoreSubject {
    /// The store under test; a clone is another handle to the same store.
    type Store: ArtifactStore + Clone + 'static;

    /// A fresh store: it holds nothing, and no other store shares its
    /// content.
    fn store(&self) -> Self::Store;

    /// Makes `store` hold other content, as opening another root or an
    /// import that replaced entries does, so that its generation must move;
    /// `false` when this kind of store cannot.
    fn replace_content(&self, _store: &Self::Store) -> bool {
        false
    }

    /// The same store as another process opens it (its own handle, its own
    /// claims), or `None` when the store lives in one process.
    fn in_another_process(&self, _store: &Self::Store) -> Option<Self::Store> {
        None
    }

    /// A fresh store whose claims are leases of `lease` (P12), or `None`
    /// when this kind of store cannot be given one.
    fn with_lease(&self, _lease: Duration) -> Option<Self::Store> {
        None
    }
}

/// What every key of the suite shares, unless a rule changes one part.
pub(super) fn components() -> KeyComponents {
    KeyComponents::new("conformance", "kiln conformance 1", "arch-1", "-O3")
}

/// The key of kernel `number` under variant 0.
pub(super) fn kernel_key(number: u32) -> StoreKey {
    StoreKey::for_artifact(&components(), &id(number, 0), None)
}

pub(super) fn id(number: u32, variant: u8) -> ArtifactId<u8> {
    ArtifactId::new(
        KernelId::named("conformance.kernel")
            .parameter(&number)
            .build(),
        variant,
    )
}

/// The key of lowered `text` under kernel 0's variant.
pub(super) fn source_key(text: &str) -> StoreKey {
    StoreKey::for_source(&components(), &id(0, 0), None, text)
}

/// Distinct, non-empty artifact bytes, `len` of them.
pub(super) fn artifact(label: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|index| label.wrapping_add(index as u8).wrapping_mul(31))
        .collect()
}

/// The artifact and work of a hit; panics with the miss otherwise.
pub(super) fn expect_hit(lookup: Lookup<Vec<u8>>, what: &str) -> (Vec<u8>, u64, Duration) {
    match lookup {
        Lookup::Hit {
            artifact,
            bytes,
            work,
        } => (artifact, bytes, work),
        Lookup::Miss(miss) => panic!("{what}: expected a hit, got a miss ({miss})"),
    }
}

pub(super) fn is_absent(lookup: &Lookup<Vec<u8>>) -> bool {
    matches!(lookup, Lookup::Miss(Miss::Absent))
}

/// Whether the store has `part`, which `rule` is of; says why the rule does
/// not apply when it has not.
pub(super) fn has_part(rule: &str, part: &str, present: bool) -> bool {
    if !present {
        not_applicable(rule, &format!("this store has no {part}"));
    }
    present
}

pub(super) fn expect_stored(outcome: StoreOutcome, what: &str) {
    assert!(
        matches!(outcome, StoreOutcome::Stored { .. }),
        "{what}: expected the put to store, got {outcome:?}"
    );
}

/// Instantiates the store conformance suite: one `#[test]` per rule, each
/// making its subject with `$subject`, an expression whose value implements
/// [`StoreSubject`](crate::conformance::StoreSubject).
#[macro_export]
macro_rules! store_conformance_suite {
    ($subject:expr) => {
        // The contract, for every store.
        $crate::store_conformance_suite!(@tests $subject;
            p1_keys_differing_in_one_component_do_not_see_each_other,
            p2_a_put_then_a_lookup_hits_with_the_same_bytes_and_work,
            p2_a_key_never_put_misses_as_absent,
            p2_a_removed_key_misses_and_removing_it_again_is_harmless,
            p2_a_put_of_another_artifact_replaces_the_first,
            p3_threads_putting_under_one_key_are_read_whole,
            p3_another_process_reads_what_one_put,
            p3_copies_put_together_are_each_found_whole,
            p3_puts_of_every_origin_together_are_each_answered_in_order,
            p5_an_empty_artifact_round_trips_or_is_refused_and_counted,
            p7_a_source_key_finds_what_was_put_with_it,
            p7_kernels_put_rekeyed_together_are_each_found_by_their_key,
            p10_a_lookup_of_many_keys_answers_each_in_order,
            l10_the_generation_is_shared_by_clones_and_moves_only_when_content_is_replaced,
            s4_statistics_count_hits_misses_and_puts,
        );
        // Claims, for a store that has them.
        $crate::store_conformance_suite!(@tests $subject;
            p4_a_held_claim_is_busy_for_a_second_once_claimant_and_free_after_its_guard_drops,
            p4_a_patient_claimant_holds_the_key_once_the_guard_drops,
            p4_a_claim_held_in_one_process_is_busy_in_another,
            p12_a_released_unpublished_key_is_claimable_by_the_next_claimant,
            p12_an_expired_lease_is_claimable_by_one_other_claimant,
        );
        // Blobs, records and groups, for a store that has each.
        $crate::store_conformance_suite!(@tests $subject;
            p2_a_named_blob_is_found_by_its_own_key_only,
            p9_explain_names_the_changed_component_or_says_never_seen,
            p6_a_batch_end_within_the_limits_keeps_every_entry,
        );
    };
    (@tests $subject:expr; $($rule:ident),* $(,)?) => {
        $(
            #[test]
            fn $rule() {
                $crate::conformance::$rule(&$subject);
            }
        )*
    };
}
