//! What kiln's tests share, written once: throw-away folders and store
//! roots ([`scratch`]), loaders with a fixed number of workers
//! ([`mod@loader`]), seeded random inputs ([`random`]), the skip or
//! failure of a test whose hardware or privilege is missing ([`require`]:
//! every skip prints through it, where a passing run shows it),
//! and the harness of tests that run real processes ([`child`]: this test
//! binary started again as a child, under rlimits or as an unprivileged
//! user, with a deadline; [`mount`]: a tmpfs of a chosen size), snapshots
//! of folders and files planted in them ([`files`]), the define tests of
//! the C++ backends ([`defines`]) and their report tests' kernels and
//! listener ([`reports`]), with the backend passed in, what holds
//! of every backend's target and its store ([`target_store`]), the worker
//! process tests' `main` and batch comparison ([`workers`]), and a real
//! `redis-server` ([`redis`]), and the test loop of a binary with its own
//! `main` ([`harness`]), and a gate that holds every thread but one
//! ([`gate`]).
//!
//! It depends on kiln-engine alone (with `testing`, for the printed skip):
//! the backends, kiln-store and the facade take it as a dev-dependency, so
//! it can name none of them. Helpers tied to one backend stay in that
//! backend's `tests/support`.

pub mod child;
pub mod defines;
pub mod device_step;
pub mod files;
pub mod gate;
pub mod harness;
pub mod loader;
pub mod mount;
pub mod random;
pub mod redis;
pub mod reports;
pub mod require;
pub mod scratch;
pub mod target_store;
pub mod tuning;
pub mod wgsl;
pub mod workers;

pub use child::{Finished, Limit, NOBODY};
pub use loader::loader;
pub use mount::Tmpfs;
pub use random::Random;
pub use require::{say, skip, skip_unless, skip_without_root, skipped};
pub use scratch::{Scratch, StoreRoots};
