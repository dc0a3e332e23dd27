//! A hipRTC program that destroys itself, and holds the process's hipRTC
//! lock for as long as it lives.

use std::ffi::{CStr, CString};
use std::sync::MutexGuard;

use crate::error::{Error, Result};
use crate::result;
use crate::sys::{self, HiprtcLibrary};
use crate::toolchain;

/// The name every program is given; diagnostics in it carry no file name.
pub(crate) const PROGRAM_NAME: &str = "kernel.hip";

/// One hipRTC program, from creation to destruction. While it lives no
/// other thread of the process enters hipRTC.
pub struct Program<'a> {
    library: &'a HiprtcLibrary,
    raw: sys::hiprtcProgram,
    compiled: bool,
    /// What comgr wrote to standard error during the compile.
    stray: String,
    // Dropped after `Drop::drop` destroyed the program: fields drop after.
    _serial: MutexGuard<'static, ()>,
}

impl<'a> Program<'a> {
    /// A program of `source`, with `headers` as `(include name, text)`.
    ///
    /// # Errors
    ///
    /// hipRTC's status.
    pub fn new(
        library: &'a HiprtcLibrary,
        source: &CStr,
        name: &CStr,
        headers: &[(CString, CString)],
    ) -> Result<Self> {
        let serial = toolchain::serial();
        let raw = result::create_program(library, source, name, headers)?;
        Ok(Self {
            library,
            raw,
            compiled: false,
            stray: String::new(),
            _serial: serial,
        })
    }

    /// Asks for the lowered name of `expression` after the compile.
    ///
    /// # Errors
    ///
    /// hipRTC's status.
    pub fn add_name_expression(&mut self, expression: &CStr) -> Result<()> {
        self.expect_compiled("hiprtcAddNameExpression", false)?;
        // SAFETY: the program is live and not yet compiled.
        unsafe { result::add_name_expression(self.library, self.raw, expression) }
    }

    /// Compiles with `options`: `Ok(false)` when the source does not
    /// compile, and [`log`](Self::log) says why.
    ///
    /// # Errors
    ///
    /// hipRTC failed for another reason than the source.
    pub fn compile(&mut self, options: &[CString]) -> Result<bool> {
        self.expect_compiled("hiprtcCompileProgram", false)?;
        let caught = crate::stderr::Caught::start();
        // SAFETY: the program is live and this thread holds the process's
        // hipRTC lock.
        let outcome = unsafe { result::compile_program(self.library, self.raw, options) };
        if let Some(caught) = caught {
            self.stray = caught.finish();
        }
        match outcome {
            Ok(()) => {
                self.compiled = true;
                Ok(true)
            }
            Err(Error::Hiprtc { code, .. }) if code == sys::HIPRTC_ERROR_COMPILATION => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// The compiler's log.
    ///
    /// # Errors
    ///
    /// hipRTC's status.
    pub fn log(&self) -> Result<String> {
        // SAFETY: the program is live.
        let mut log = unsafe { result::program_log(self.library, self.raw) }?;
        // comgr's own words, which it wrote past the log, belong with it.
        if !self.stray.trim().is_empty() {
            if !log.is_empty() && !log.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(&self.stray);
        }
        Ok(log)
    }

    /// The code object of a compile that succeeded.
    ///
    /// # Errors
    ///
    /// hipRTC's status.
    pub fn code(&self) -> Result<Vec<u8>> {
        self.expect_compiled("hiprtcGetCode", true)?;
        // SAFETY: the program is live and compiled.
        unsafe { result::code(self.library, self.raw) }
    }

    /// The symbol `expression` was lowered to by a compile that succeeded.
    ///
    /// # Errors
    ///
    /// hipRTC's status.
    pub fn lowered_name(&self, expression: &CStr) -> Result<String> {
        self.expect_compiled("hiprtcGetLoweredName", true)?;
        // SAFETY: the program is live and compiled; hipRTC answers with a
        // status for an expression that was never added.
        unsafe { result::lowered_name(self.library, self.raw, expression) }
    }

    /// Refuses a call made before (or after) the compile it needs.
    fn expect_compiled(&self, call: &'static str, compiled: bool) -> Result<()> {
        if self.compiled == compiled {
            return Ok(());
        }
        Err(Error::Hiprtc {
            call,
            code: sys::HIPRTC_SUCCESS,
            message: if compiled {
                "the program has not compiled".to_owned()
            } else {
                "the program is already compiled".to_owned()
            },
        })
    }
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: the program is live and never used after this.
        if let Err(error) = unsafe { result::destroy_program(self.library, self.raw) } {
            log::warn!("could not destroy a hipRTC program: {error}");
        }
    }
}
