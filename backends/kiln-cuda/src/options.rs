//! How a CUDA kernel is compiled: the NVRTC options it carries.
//!
//! A define reaches NVRTC as one `-DNAME=VALUE` argument and never as an
//! option of its own: [`CudaOptions::check_defines`], which the compiler
//! runs before lowering each kernel, refuses by [`kiln_engine::define`]'s
//! rule a name that is not a C identifier (`-include /etc/passwd`, `X -DY`,
//! `A=B`) and a value holding a NUL byte (NVRTC's options are C strings) or
//! a line break (a macro defined outside the source is one line). Anything
//! else in a value, spaces and dashes included, is the macro's text.

use std::hash::Hash;

pub use kiln_cxx::CxxStandard;
use kiln_cxx::defines;
use serde::{Deserialize, Serialize};

use crate::architecture::Architecture;
use crate::error::Error;

/// The C++ standard NVRTC compiles in when a kernel does not choose one.
pub const DEFAULT_STANDARD: CxxStandard = CxxStandard::Cxx17;

/// A kernel's compile options. Every field changes the compiled code, so
/// every field is part of the kernel's id and of its artifact's key.
///
/// ```
/// use kiln_cuda::{Architecture, CudaOptions, CxxStandard};
///
/// let options = CudaOptions::default()
///     .standard(CxxStandard::Cxx20)
///     .fast_math(true)
///     .define("BLOCK", "256")
///     .max_registers(64);
/// assert_eq!(
///     options.arguments(Architecture::new(9, 0)),
///     ["-arch=sm_90", "-std=c++20", "--use_fast_math", "-DBLOCK=256", "-maxrregcount=64"],
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CudaOptions {
    /// The architecture to build for; `None` builds for the target's device.
    pub architecture: Option<Architecture>,
    /// The C++ standard; `None` is [`DEFAULT_STANDARD`].
    pub standard: Option<CxxStandard>,
    /// `--use_fast_math`: approximate division, square root and
    /// transcendentals, denormals flushed to zero.
    pub fast_math: bool,
    /// Preprocessor definitions, `-D<name>` or `-D<name>=<value>`, in order;
    /// each name an identifier and each value one line (see
    /// [`check_defines`](Self::check_defines)).
    pub defines: Vec<(String, Option<String>)>,
    /// `-maxrregcount`: the most registers a thread may use.
    pub max_registers: Option<u32>,
    /// Any other NVRTC options, passed as given after the ones above.
    pub extra: Vec<String>,
}

impl CudaOptions {
    /// Builds for `architecture` whatever the target's device is.
    pub fn architecture(mut self, architecture: Architecture) -> Self {
        self.architecture = Some(architecture);
        self
    }

    kiln_cxx::option_setters!();

    /// Caps the registers a thread may use.
    pub fn max_registers(mut self, registers: u32) -> Self {
        self.max_registers = Some(registers);
        self
    }

    /// Adds an NVRTC option of its own (`-lineinfo`, say). An option that
    /// names a file or an include folder (`-I`, `--include-path`,
    /// `-include`, ...) is refused when the kernel lowers: see
    /// [`check_flags`](Self::check_flags).
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.extra.push(flag.into());
        self
    }

    /// Refuses a define that would not reach NVRTC as one macro, by
    /// [`kiln_engine::define::check`] (through [`kiln_cxx::defines::check`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidDefine`] for the first define whose name is not a C
    /// identifier (`[A-Za-z_][A-Za-z0-9_]*`), or whose value holds a NUL
    /// byte or a line break.
    pub fn check_defines(&self) -> Result<(), Error> {
        defines::check(&self.defines, "NVRTC").map_err(|refused| Error::InvalidDefine {
            name: refused.name,
            problem: refused.problem,
        })
    }

    /// Refuses an option that names a file or an include folder (P13):
    /// kiln resolves includes itself, and a path given to NVRTC would be
    /// read behind the key.
    ///
    /// # Errors
    ///
    /// [`Error::FileOption`] for the first such option of
    /// [`extra`](Self::extra).
    pub fn check_flags(&self) -> Result<(), Error> {
        match self.extra.iter().find(|flag| kiln_cxx::names_a_file(flag)) {
            Some(flag) => Err(Error::FileOption { flag: flag.clone() }),
            None => Ok(()),
        }
    }

    /// The architecture code is built for on a target whose device is
    /// `device`.
    pub fn architecture_on(&self, device: Architecture) -> Architecture {
        self.architecture.unwrap_or(device)
    }

    /// NVRTC's arguments for these options on a target whose device is
    /// `device`, in a fixed order: one argument per define. The defines are
    /// not checked here; [`check_defines`](Self::check_defines) does.
    pub fn arguments(&self, device: Architecture) -> Vec<String> {
        let mut arguments = vec![self.architecture_on(device).nvrtc_option()];
        arguments.extend(self.arguments_past_architecture());
        arguments
    }

    /// NVRTC's arguments for these options after the architecture's, in
    /// [`arguments`](Self::arguments)' order: what a store key names as
    /// options, beside the architecture it names apart.
    pub fn arguments_past_architecture(&self) -> Vec<String> {
        let mut arguments = vec![self.standard.unwrap_or(DEFAULT_STANDARD).flag().to_owned()];
        if self.fast_math {
            arguments.push("--use_fast_math".into());
        }
        arguments.extend(defines::arguments(&self.defines));
        if let Some(registers) = self.max_registers {
            arguments.push(format!("-maxrregcount={registers}"));
        }
        arguments.extend(self.extra.iter().cloned());
        arguments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // P13
    #[test]
    fn an_option_naming_a_file_or_an_include_folder_is_refused() {
        for flag in [
            "-I/usr/include",
            "-I",
            "--include-path=/tmp",
            "-include",
            "--pre-include=x.h",
            "-isystem/x",
        ] {
            let error = CudaOptions::default()
                .flag("-lineinfo")
                .flag(flag)
                .check_flags()
                .expect_err("a path");
            assert!(matches!(&error, Error::FileOption { flag: refused } if refused == flag));
        }
        CudaOptions::default()
            .flag("-lineinfo")
            .flag("-rdc=true")
            .check_flags()
            .expect("no path");
    }

    #[test]
    fn a_define_is_one_argument_whatever_its_value() {
        let options = CudaOptions::default().define("PROBE", "1 -include /etc/passwd");
        options.check_defines().expect("the value is macro text");
        assert_eq!(
            options.arguments_past_architecture(),
            ["-std=c++17", "-DPROBE=1 -include /etc/passwd"]
        );
    }

    #[test]
    fn a_define_name_that_is_not_an_identifier_is_refused_naming_it() {
        kiln_test_support::defines::assert_options_refuse_names_that_are_not_identifiers(
            |name| {
                let options = CudaOptions::default().define("TILE", "16");
                options.define_name(name).check_defines().err()
            },
            |error| match error {
                Error::InvalidDefine { name, problem } => Some((name.as_str(), problem)),
                _ => None,
            },
        );
    }
}
