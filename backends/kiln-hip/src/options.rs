//! What a HIP kernel is compiled under: the variant (the target's gfx
//! architecture) and each kernel's own compile options.
//!
//! A define reaches hipRTC as one `-DNAME=VALUE` argument and never as an
//! option of its own: [`HipOptions::compile_flags`], which every lowering
//! and key goes through, refuses by [`kiln_engine::define`]'s rule a name
//! that is not a C identifier (`-include /etc/passwd`, `X -DY`, `A=B`) and
//! a value holding a NUL byte (hipRTC's options are C strings) or a line
//! break (a macro defined outside the source is one line). Anything else in
//! a value, spaces and dashes included, is the macro's text.

use std::fmt;
use std::hash::{Hash, Hasher};

pub use kiln_cxx::CxxStandard;
use kiln_cxx::defines;
use serde::{Deserialize, Serialize};

use crate::architecture::Architecture;
use crate::error::{Error, Result};

/// The compile choice a HIP artifact is built under: the AMD GPU
/// architecture.
///
/// A target gives its device's (see
/// [`HipTarget::variant`](crate::HipTarget::variant)); a kernel compiled
/// under another variant is another artifact.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HipVariant {
    /// The architecture code objects are compiled for.
    pub architecture: Architecture,
}

impl HipVariant {
    /// The variant for `architecture`.
    pub fn new(architecture: Architecture) -> Self {
        Self { architecture }
    }
}

impl fmt::Debug for HipVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.architecture)
    }
}

/// One kernel's compile options. Every option is part of the kernel's id
/// and of its artifact's key.
///
/// ```
/// use kiln_hip::{CxxStandard, HipOptions};
///
/// let options = HipOptions::new()
///     .standard(CxxStandard::Cxx17)
///     .fast_math(true)
///     .define("TILE", "16")
///     .flag("-fno-unroll-loops");
/// assert_eq!(options.defines.len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HipOptions {
    /// `-std`; `None` leaves hipRTC's default.
    pub standard: Option<CxxStandard>,
    /// `-ffast-math`.
    pub fast_math: bool,
    /// `-D` definitions, in order: `(name, value)`, no value for a bare
    /// `-DNAME`; each name an identifier and each value one line (see
    /// [`compile_flags`](Self::compile_flags)).
    pub defines: Vec<(String, Option<String>)>,
    /// Any other flags, passed as given after the rest. Flags that choose
    /// the architecture are refused (see [`Error::ArchitectureFlag`]).
    pub flags: Vec<String>,
}

impl HipOptions {
    /// hipRTC's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    kiln_cxx::option_setters!();

    /// Adds a flag of hipRTC's (clang's) own.
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// The flags handed to hipRTC for `architecture`: the architecture first, then
    /// the options in a fixed order.
    ///
    /// # Errors
    ///
    /// [`Error::ArchitectureFlag`] for an extra flag that would choose the
    /// architecture: it would reach hipRTC unchecked, and hipRTC aborts the
    /// process on a target it lacks. [`Error::InvalidDefine`] for a define
    /// whose name is not a C identifier (`[A-Za-z_][A-Za-z0-9_]*`), or whose
    /// value holds a NUL byte or a line break.
    pub fn compile_flags(&self, architecture: &Architecture) -> Result<Vec<String>> {
        if let Some(flag) = self.flags.iter().find(|flag| chooses_architecture(flag)) {
            return Err(Error::ArchitectureFlag { flag: flag.clone() });
        }
        if let Some(flag) = self.flags.iter().find(|flag| kiln_cxx::names_a_file(flag)) {
            return Err(Error::FileFlag { flag: flag.clone() });
        }
        defines::check(&self.defines, "hipRTC").map_err(|refused| Error::InvalidDefine {
            name: refused.name,
            problem: refused.problem,
        })?;
        let mut flags = vec![format!("--gpu-architecture={architecture}")];
        flags.extend(self.flags_past_architecture());
        Ok(flags)
    }

    /// The flags of [`compile_flags`](Self::compile_flags) after the
    /// architecture's, unchecked: what a store key names as options, beside
    /// the architecture it names apart.
    pub fn flags_past_architecture(&self) -> Vec<String> {
        let mut flags: Vec<String> = self
            .standard
            .map(|standard| standard.flag().to_owned())
            .into_iter()
            .collect();
        if self.fast_math {
            flags.push("-ffast-math".to_owned());
        }
        flags.extend(defines::arguments(&self.defines));
        flags.extend(self.flags.iter().cloned());
        flags
    }
}

/// The options' part of a kernel's id: what `#[derive(Hash)]` hashed when
/// kiln-hip had a `CxxStandard` of its own, from C++11, so that ids (and
/// the store entries keyed by them) stay as they were now that the standard
/// is kiln-cxx's, which counts from C++03.
impl Hash for HipOptions {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let standard_position = self.standard.map(|standard| standard as isize - 1);
        standard_position.hash(state);
        self.fast_math.hash(state);
        self.defines.hash(state);
        self.flags.hash(state);
    }
}

/// Whether `flag` could set the target processor: every clang spelling of
/// it contains one of these words.
fn chooses_architecture(flag: &str) -> bool {
    ["arch", "mcpu", "target-cpu", "amdgpu-target", "offload"]
        .iter()
        .any(|word| flag.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kiln-hip's own standard and options, as they were derived before
    /// the standard moved to kiln-cxx.
    #[derive(Hash)]
    #[allow(dead_code, reason = "only hashed, as the old options were")]
    enum StandardBeforeKilnCxx {
        Cxx11,
        Cxx14,
        Cxx17,
        Cxx20,
    }

    #[derive(Hash)]
    struct OptionsBeforeKilnCxx {
        standard: Option<StandardBeforeKilnCxx>,
        fast_math: bool,
        defines: Vec<(String, Option<String>)>,
        flags: Vec<String>,
    }

    #[test]
    fn options_join_a_kernel_id_as_they_did_before_the_standard_was_shared() {
        let before = [
            None,
            Some(StandardBeforeKilnCxx::Cxx11),
            Some(StandardBeforeKilnCxx::Cxx14),
            Some(StandardBeforeKilnCxx::Cxx17),
            Some(StandardBeforeKilnCxx::Cxx20),
        ];
        let now = [
            None,
            Some(CxxStandard::Cxx11),
            Some(CxxStandard::Cxx14),
            Some(CxxStandard::Cxx17),
            Some(CxxStandard::Cxx20),
        ];
        for (before, now) in before.into_iter().zip(now) {
            let old = OptionsBeforeKilnCxx {
                standard: before,
                fast_math: true,
                // Defines are kept in canonical order: the same ids as before
                // for defines given in that order.
                defines: vec![("FAST".into(), None), ("TILE".into(), Some("16".into()))],
                flags: vec!["-Wall".into()],
            };
            let mut new = HipOptions::new()
                .fast_math(true)
                .define("TILE", "16")
                .define_name("FAST")
                .flag("-Wall");
            new.standard = now;
            assert_eq!(
                kiln_engine::KernelId::named("k").parameter(&old).build(),
                kiln_engine::KernelId::named("k").parameter(&new).build(),
                "{now:?}"
            );
        }
    }

    fn gfx90a() -> Architecture {
        Architecture::new("gfx90a").expect("a valid name")
    }

    #[test]
    fn flags_start_with_the_architecture_and_keep_the_options_order() {
        let options = HipOptions::new()
            .flag("-Wall")
            .define("TILE", "16")
            .define_name("FAST")
            .standard(CxxStandard::Cxx17)
            .fast_math(true);
        assert_eq!(
            options
                .compile_flags(&gfx90a())
                .expect("no architecture flag"),
            [
                "--gpu-architecture=gfx90a",
                "-std=c++17",
                "-ffast-math",
                "-DFAST",
                "-DTILE=16",
                "-Wall"
            ]
        );
    }

    // B2
    #[test]
    fn a_flag_that_chooses_the_architecture_is_refused() {
        for flag in [
            "--offload-arch=gfx1100",
            "--gpu-architecture=gfx1100",
            "-mcpu=gfx1100",
            "-Xclang -target-cpu",
        ] {
            let error = HipOptions::new()
                .flag(flag)
                .compile_flags(&gfx90a())
                .expect_err("an architecture flag is refused");
            assert!(matches!(error, Error::ArchitectureFlag { .. }), "{error}");
        }
    }

    // P13
    #[test]
    fn a_flag_naming_a_file_or_an_include_folder_is_refused() {
        for flag in [
            "-I/usr/include",
            "--include-path=/tmp",
            "-include",
            "-isystem/x",
        ] {
            let error = HipOptions::new()
                .flag(flag)
                .compile_flags(&gfx90a())
                .expect_err("a path is refused");
            assert!(matches!(error, Error::FileFlag { .. }), "{error}");
        }
    }

    #[test]
    fn a_define_is_one_flag_whatever_its_value() {
        let flags = HipOptions::new()
            .define("PROBE", "1 -include /etc/passwd")
            .compile_flags(&gfx90a())
            .expect("the value is macro text");
        assert_eq!(
            flags,
            [
                "--gpu-architecture=gfx90a",
                "-DPROBE=1 -include /etc/passwd"
            ]
        );
    }

    #[test]
    fn a_define_name_that_is_not_an_identifier_is_refused_naming_it() {
        kiln_test_support::defines::assert_options_refuse_names_that_are_not_identifiers(
            |name| {
                let options = HipOptions::new().define("TILE", "16");
                options.define_name(name).compile_flags(&gfx90a()).err()
            },
            |error| match error {
                Error::InvalidDefine { name, problem } => Some((name.as_str(), problem)),
                _ => None,
            },
        );
    }
}
