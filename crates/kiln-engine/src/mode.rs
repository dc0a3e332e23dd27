//! The process mode (L11): whether the targets a program creates run on
//! their devices, or only compile, for a named architecture, into the store.
//!
//! A program filling a store for a GPU it does not have (a CI machine, a
//! build host, a container image build) runs as it always does, under
//! `KILN_MODE=compile-only`: every backend constructor that would open a
//! device (`CudaTarget::on_device`, `HipTarget::on_device`,
//! `WgpuTarget::open`, ...) makes a compile-only target instead, for the
//! architecture the mode names, and opens no device and no driver. Every
//! kernel the program loads compiles (or comes from the store), and the
//! store ends holding exactly what the same program would load on that
//! GPU; a launch through kiln is a no-op that succeeds.
//!
//! | variable | what | example |
//! |---|---|---|
//! | `KILN_MODE` | `compile-only`, or `run` (the default) | `compile-only` |
//! | `KILN_CUDA_ARCH` | the CUDA architecture compile-only CUDA targets compile for | `sm_90` |
//! | `KILN_HIP_ARCH` | the gfx architecture compile-only HIP targets compile for | `gfx90a` |
//! | `KILN_WGPU_PROFILE` | the adapter compile-only wgpu targets stand for: a built-in profile or a profile file | `lavapipe` |
//!
//! wgpu targets need no architecture: naga's artifacts serve every
//! adapter. What a program loads does depend on the adapter's features (a
//! kernel needing f16 is refused where it is missing, and a program may
//! choose its kernels by them), so `KILN_WGPU_PROFILE` names the adapter
//! meant; without it, a compile-only wgpu target stands for an adapter
//! without shader features (kiln-wgpu's `AdapterProfile` says more).
//!
//! In code, a [`ProcessModeOverride`] sets the mode for the thread that
//! made it until it drops, whatever `KILN_MODE` says: a program's own
//! `--compile-only` flag, or a test. An override names its architectures
//! itself ([`CompileOnly`]); those it leaves out come from the variables.
//!
//! ```
//! use kiln_engine::mode::{self, CompileOnly, ProcessMode, ProcessModeOverride};
//!
//! {
//!     let _compile_only = ProcessModeOverride::new(ProcessMode::CompileOnly(
//!         CompileOnly::default().cuda_architecture("sm_90"),
//!     ));
//!     let plan = mode::compile_only().expect("compile-only in this scope");
//!     assert_eq!(plan.cuda(), Some("sm_90"));
//!     // Targets made here open no device.
//! }
//! // Out of the scope, the mode is `KILN_MODE`'s again.
//! # if std::env::var_os("KILN_MODE").is_none() {
//! assert!(mode::compile_only().is_none());
//! # }
//! ```

use std::cell::RefCell;
use std::marker::PhantomData;

use crate::config::warn_once;

/// The variable choosing the process mode: `compile-only` or `run`.
pub const MODE_VARIABLE: &str = "KILN_MODE";
/// The CUDA architecture of compile-only CUDA targets (`sm_90`).
pub const CUDA_ARCH_VARIABLE: &str = "KILN_CUDA_ARCH";
/// The gfx architecture of compile-only HIP targets (`gfx90a`).
pub const HIP_ARCH_VARIABLE: &str = "KILN_HIP_ARCH";
/// The adapter compile-only wgpu targets stand for: a built-in profile's
/// name (`lavapipe`) or the path of a profile file.
pub const WGPU_PROFILE_VARIABLE: &str = "KILN_WGPU_PROFILE";

/// What the targets a program creates do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProcessMode {
    /// Targets open their devices and kernels launch: the default.
    #[default]
    Run,
    /// Targets compile for the architectures named and open no device;
    /// launches through kiln do nothing and succeed.
    CompileOnly(CompileOnly),
}

/// The architectures compile-only targets compile for, one per backend; a
/// backend without one refuses to make a target, saying which variable
/// names it. wgpu's is an adapter profile, `baseline` when none is named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompileOnly {
    cuda: Option<String>,
    hip: Option<String>,
    wgpu: Option<String>,
}

impl CompileOnly {
    /// The same, with CUDA targets compiling for `architecture` (`sm_90`).
    #[must_use]
    pub fn cuda_architecture(mut self, architecture: impl Into<String>) -> Self {
        self.cuda = Some(architecture.into());
        self
    }

    /// The same, with HIP targets compiling for `architecture` (`gfx90a`).
    #[must_use]
    pub fn hip_architecture(mut self, architecture: impl Into<String>) -> Self {
        self.hip = Some(architecture.into());
        self
    }

    /// The same, with wgpu targets standing for the adapter `profile`
    /// names: a built-in profile (`lavapipe`) or a profile file's path.
    #[must_use]
    pub fn wgpu_profile(mut self, profile: impl Into<String>) -> Self {
        self.wgpu = Some(profile.into());
        self
    }

    /// The CUDA architecture, as given (the backend parses it).
    pub fn cuda(&self) -> Option<&str> {
        self.cuda.as_deref()
    }

    /// The gfx architecture, as given (the backend parses it).
    pub fn hip(&self) -> Option<&str> {
        self.hip.as_deref()
    }

    /// The wgpu adapter profile, as given (the backend finds it).
    pub fn wgpu(&self) -> Option<&str> {
        self.wgpu.as_deref()
    }

    /// The architectures the variables name, each where this names none.
    fn or_from(self, lookup: &impl Fn(&'static str) -> Option<String>) -> Self {
        let named = |variable| lookup(variable).filter(|value| !value.trim().is_empty());
        Self {
            cuda: self.cuda.or_else(|| named(CUDA_ARCH_VARIABLE)),
            hip: self.hip.or_else(|| named(HIP_ARCH_VARIABLE)),
            wgpu: self.wgpu.or_else(|| named(WGPU_PROFILE_VARIABLE)),
        }
    }
}

thread_local! {
    /// The overrides open on this thread, innermost last.
    static OVERRIDES: RefCell<Vec<ProcessMode>> = const { RefCell::new(Vec::new()) };
}

/// Sets the process mode for the thread that made it, until it drops; the
/// mode before it comes back then. Overrides nest. It is not `Send`: it
/// belongs to the thread whose targets it changes.
#[derive(Debug)]
#[must_use = "the mode holds only while the override lives"]
pub struct ProcessModeOverride {
    depth: usize,
    _thread: PhantomData<*const ()>,
}

impl ProcessModeOverride {
    /// Puts this thread in `mode` until the override drops.
    pub fn new(mode: ProcessMode) -> Self {
        let depth = OVERRIDES.with_borrow_mut(|overrides| {
            overrides.push(mode);
            overrides.len()
        });
        Self {
            depth,
            _thread: PhantomData,
        }
    }
}

impl Drop for ProcessModeOverride {
    fn drop(&mut self) {
        // An override dropped out of order takes the inner ones with it:
        // their scopes ended with it.
        OVERRIDES.with_borrow_mut(|overrides| overrides.truncate(self.depth - 1));
    }
}

/// The mode of this thread: its innermost [`ProcessModeOverride`], else
/// `KILN_MODE`. A `KILN_MODE` that is neither `compile-only` nor `run` is
/// `run`, with a warning once.
pub fn process_mode() -> ProcessMode {
    mode_with(|name| std::env::var(name).ok())
}

/// The architectures compile-only targets compile for, when this thread is
/// in compile-only mode.
pub fn compile_only() -> Option<CompileOnly> {
    match process_mode() {
        ProcessMode::CompileOnly(plan) => Some(plan),
        ProcessMode::Run => None,
    }
}

/// Whether this thread is in compile-only mode: where a program skips its
/// own device work (buffers, streams, readbacks) that kiln cannot skip for
/// it.
pub fn is_compile_only() -> bool {
    compile_only().is_some()
}

fn mode_with(lookup: impl Fn(&'static str) -> Option<String>) -> ProcessMode {
    let overridden = OVERRIDES.with_borrow(|overrides| overrides.last().cloned());
    let mode = match overridden {
        Some(mode) => mode,
        None => match lookup(MODE_VARIABLE) {
            None => ProcessMode::Run,
            Some(value) => match value.trim() {
                "compile-only" | "compile_only" => ProcessMode::CompileOnly(CompileOnly::default()),
                "run" | "" => ProcessMode::Run,
                _ => {
                    warn_once(
                        MODE_VARIABLE,
                        &value,
                        format!(
                            "{MODE_VARIABLE}={value:?} is not a mode (`compile-only` or `run`); \
                             targets open their devices"
                        ),
                    );
                    ProcessMode::Run
                }
            },
        },
    };
    match mode {
        ProcessMode::CompileOnly(plan) => ProcessMode::CompileOnly(plan.or_from(&lookup)),
        ProcessMode::Run => ProcessMode::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variables(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&'static str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    // L11
    #[test]
    fn kiln_mode_compile_only_names_the_architectures_of_the_variables() {
        let mode = mode_with(variables(&[
            (MODE_VARIABLE, " compile-only "),
            (CUDA_ARCH_VARIABLE, "sm_90"),
            (HIP_ARCH_VARIABLE, "gfx90a"),
            (WGPU_PROFILE_VARIABLE, "lavapipe"),
        ]));
        let ProcessMode::CompileOnly(plan) = mode else {
            panic!("compile-only: {mode:?}");
        };
        assert_eq!(
            (plan.cuda(), plan.hip(), plan.wgpu()),
            (Some("sm_90"), Some("gfx90a"), Some("lavapipe"))
        );
        assert_eq!(mode_with(variables(&[])), ProcessMode::Run);
        assert_eq!(
            mode_with(variables(&[
                (MODE_VARIABLE, "run"),
                (CUDA_ARCH_VARIABLE, "sm_90")
            ])),
            ProcessMode::Run,
            "an architecture alone does not make a process compile-only"
        );
        assert_eq!(
            mode_with(variables(&[(MODE_VARIABLE, "compile")])),
            ProcessMode::Run,
            "a misspelt mode runs on the device, with a warning"
        );
    }

    // L11
    #[test]
    fn an_override_holds_on_its_thread_until_it_drops_and_beats_the_variable() {
        let compile_only = variables(&[
            (MODE_VARIABLE, "compile-only"),
            (CUDA_ARCH_VARIABLE, "sm_80"),
        ]);
        {
            let _outer = ProcessModeOverride::new(ProcessMode::CompileOnly(
                CompileOnly::default().hip_architecture("gfx942"),
            ));
            let ProcessMode::CompileOnly(plan) = mode_with(&compile_only) else {
                panic!("the override is compile-only");
            };
            assert_eq!(plan.hip(), Some("gfx942"));
            assert_eq!(plan.cuda(), Some("sm_80"), "left out: from the variable");
            {
                let _inner = ProcessModeOverride::new(ProcessMode::Run);
                assert_eq!(mode_with(&compile_only), ProcessMode::Run);
            }
            assert!(matches!(
                mode_with(variables(&[])),
                ProcessMode::CompileOnly(_)
            ));
            let elsewhere = std::thread::spawn(|| mode_with(variables(&[])))
                .join()
                .expect("the thread ends");
            assert_eq!(
                elsewhere,
                ProcessMode::Run,
                "another thread is not overridden"
            );
        }
        assert_eq!(mode_with(variables(&[])), ProcessMode::Run);
    }
}
