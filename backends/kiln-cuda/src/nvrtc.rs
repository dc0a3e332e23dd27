//! NVRTC, one layer above cudarc's raw bindings: every call returns a
//! `Result`, a program is destroyed when it drops, and a compile returns
//! the cubin, the PTX, the lowered entry name and the log together.
//!
//! cudarc's own safe NVRTC layer only produces PTX; a cubin for the device's
//! exact architecture needs `nvrtcGetCUBIN`, so this layer sits on
//! `cudarc::nvrtc::sys` directly.

use std::ffi::{CStr, CString, c_char, c_int};
use std::fmt;
use std::ptr;

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};
use serde::{Deserialize, Serialize};

use kiln_engine::store::LibraryFile;

use crate::architecture::Architecture;
use crate::error::Error;
use crate::library::{self, OpenedLibrary};

/// NVRTC's version, `major.minor`: part of every artifact's key, with the
/// digest of NVRTC's library ([`Nvrtc::library_file`]), since a patch
/// release keeps the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NvrtcVersion {
    /// Major version (13 for CUDA 13).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl fmt::Display for NvrtcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// An open NVRTC: its version, its library and the architectures it
/// compiles for.
///
/// Holding one proves the library is loaded and has every function kiln-cuda
/// calls, so its methods never reach a cudarc panic.
#[derive(Debug, Clone)]
pub struct Nvrtc {
    version: NvrtcVersion,
    architectures: Vec<Architecture>,
    library: &'static OpenedLibrary,
}

impl Nvrtc {
    /// Opens NVRTC (see [`library`](crate::library) for where it looks).
    ///
    /// # Errors
    ///
    /// The library is missing or too old, or it does not answer its version.
    pub fn open() -> Result<Self, Error> {
        let opened = library::nvrtc()?;
        let mut major: c_int = 0;
        let mut minor: c_int = 0;
        // SAFETY: NVRTC is loaded with every symbol checked (`library::nvrtc`),
        // and both pointers are to live locals.
        check("nvrtcVersion", unsafe {
            sys::nvrtcVersion(&mut major, &mut minor)
        })?;
        let mut count: c_int = 0;
        // SAFETY: as above; `count` is a live local.
        check("nvrtcGetNumSupportedArchs", unsafe {
            sys::nvrtcGetNumSupportedArchs(&mut count)
        })?;
        let mut numbers: Vec<c_int> = vec![0; usize::try_from(count).unwrap_or(0)];
        if !numbers.is_empty() {
            // SAFETY: `numbers` has room for the `count` entries NVRTC said it
            // would write.
            check("nvrtcGetSupportedArchs", unsafe {
                sys::nvrtcGetSupportedArchs(numbers.as_mut_ptr())
            })?;
        }
        let architectures = numbers
            .into_iter()
            .filter_map(|number| u32::try_from(number).ok())
            .map(|number| Architecture::new(number / 10, number % 10))
            .collect();
        Ok(Self {
            version: NvrtcVersion {
                major: u32::try_from(major).unwrap_or(0),
                minor: u32::try_from(minor).unwrap_or(0),
            },
            architectures,
            library: opened,
        })
    }

    /// NVRTC's version.
    pub fn version(&self) -> NvrtcVersion {
        self.version
    }

    /// Every architecture this NVRTC compiles for, oldest first.
    pub fn supported_architectures(&self) -> &[Architecture] {
        &self.architectures
    }

    /// Where the library was found.
    pub fn origin(&self) -> &str {
        self.library.origin()
    }

    /// The library file loaded, by its name and the digest of its bytes:
    /// the compiler's identity beside [`version`](Self::version) (P1). Read
    /// once per process, on the first call.
    pub fn library_file(&self) -> &'static LibraryFile {
        self.library.file_identity()
    }

    /// Compiles `request`; a compile error is a [`CompileOutcome`] with no
    /// output, not an `Err`.
    ///
    /// # Errors
    ///
    /// An NVRTC call other than the compile failed, or an input holds a NUL
    /// byte NVRTC cannot take.
    pub(crate) fn compile(&self, request: &CompileRequest<'_>) -> Result<CompileOutcome, Error> {
        let source = c_string("the source", request.source)?;
        let name = c_string("the program name", request.program_name)?;
        let header_texts = request
            .headers
            .iter()
            .map(|(header, text)| c_string(&format!("header {header}"), text))
            .collect::<Result<Vec<_>, _>>()?;
        let header_names = request
            .headers
            .iter()
            .map(|(header, _)| c_string("a header name", header))
            .collect::<Result<Vec<_>, _>>()?;
        let text_pointers: Vec<*const c_char> =
            header_texts.iter().map(|text| text.as_ptr()).collect();
        let name_pointers: Vec<*const c_char> =
            header_names.iter().map(|name| name.as_ptr()).collect();
        let arguments = request
            .arguments
            .iter()
            .map(|argument| c_string("an option", argument))
            .collect::<Result<Vec<_>, _>>()?;
        let argument_pointers: Vec<*const c_char> =
            arguments.iter().map(|argument| argument.as_ptr()).collect();
        let name_expressions = request
            .name_expressions
            .iter()
            .map(|expression| c_string("an entry point", expression))
            .collect::<Result<Vec<_>, _>>()?;

        let program = Program::create(&source, &name, &text_pointers, &name_pointers)?;
        for name_expression in &name_expressions {
            // SAFETY: the program is live and the expression is a
            // NUL-terminated string that outlives the call (NVRTC copies it).
            check("nvrtcAddNameExpression", unsafe {
                sys::nvrtcAddNameExpression(program.0, name_expression.as_ptr())
            })?;
        }
        let count = c_int::try_from(argument_pointers.len())
            .map_err(|_| Error::Invalid("too many NVRTC options".into()))?;
        // SAFETY: the program is live; `argument_pointers` holds `count`
        // NUL-terminated strings owned by `arguments`, alive for the call.
        let status =
            unsafe { sys::nvrtcCompileProgram(program.0, count, argument_pointers.as_ptr()) };
        let log = program.log()?;
        if status != nvrtcResult::NVRTC_SUCCESS {
            return Ok(CompileOutcome {
                status: describe(status),
                invalid_option: status == nvrtcResult::NVRTC_ERROR_INVALID_OPTION,
                transient: matches!(
                    status,
                    nvrtcResult::NVRTC_ERROR_OUT_OF_MEMORY
                        | nvrtcResult::NVRTC_ERROR_PROGRAM_CREATION_FAILURE
                        | nvrtcResult::NVRTC_ERROR_INTERNAL_ERROR
                        | nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE
                ),
                log,
                output: None,
            });
        }
        let output = CompileOutput {
            cubin: program.cubin()?,
            ptx: program.ptx()?,
            lowered_names: name_expressions
                .iter()
                .map(|expression| program.lowered_name(expression))
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(CompileOutcome {
            status: describe(status),
            invalid_option: false,
            transient: false,
            log,
            output: Some(output),
        })
    }
}

/// What to compile: one program, its entry points.
pub(crate) struct CompileRequest<'a> {
    /// The name diagnostics give the source file.
    pub program_name: &'a str,
    /// The CUDA C++ text.
    pub source: &'a str,
    /// `(include name, text)` of each header the source may include.
    pub headers: &'a [(String, String)],
    /// NVRTC's options, in order.
    pub arguments: &'a [String],
    /// The entry points as name expressions: plain names or template
    /// instantiations such as `scale<float, 128>`.
    pub name_expressions: &'a [String],
}

/// What a compile gave: the log always, the output when it succeeded.
pub(crate) struct CompileOutcome {
    /// NVRTC's result, described.
    pub status: String,
    /// NVRTC refused an option (an unknown architecture, say) before
    /// compiling anything.
    pub invalid_option: bool,
    /// The failure is NVRTC's or the machine's (out of memory, an internal
    /// error), not the source's: never remembered (P11).
    pub transient: bool,
    /// The compiler's log, possibly empty.
    pub log: String,
    /// The binaries, when the compile succeeded.
    pub output: Option<CompileOutput>,
}

/// A successful compile's binaries.
pub(crate) struct CompileOutput {
    /// The cubin for the exact architecture asked.
    pub cubin: Vec<u8>,
    /// The PTX, without its terminating NUL.
    pub ptx: String,
    /// Each entry point's symbol in both, in the request's order.
    pub lowered_names: Vec<String>,
}

/// An NVRTC program, destroyed when it drops.
struct Program(nvrtcProgram);

impl Program {
    fn create(
        source: &CStr,
        name: &CStr,
        header_texts: &[*const c_char],
        header_names: &[*const c_char],
    ) -> Result<Self, Error> {
        let count = c_int::try_from(header_texts.len())
            .map_err(|_| Error::Invalid("too many headers".into()))?;
        let mut program: nvrtcProgram = ptr::null_mut();
        let (texts, names) = if header_texts.is_empty() {
            (ptr::null(), ptr::null())
        } else {
            (header_texts.as_ptr(), header_names.as_ptr())
        };
        // SAFETY: NVRTC is loaded (a `Nvrtc` exists); every pointer is to a
        // NUL-terminated string alive for the call, the two header arrays
        // hold `count` entries each, and NVRTC copies all of it.
        check("nvrtcCreateProgram", unsafe {
            sys::nvrtcCreateProgram(
                &mut program,
                source.as_ptr(),
                name.as_ptr(),
                count,
                texts,
                names,
            )
        })?;
        Ok(Self(program))
    }

    fn log(&self) -> Result<String, Error> {
        let mut size = 0usize;
        // SAFETY: the program is live; `size` is a live local.
        check("nvrtcGetProgramLogSize", unsafe {
            sys::nvrtcGetProgramLogSize(self.0, &mut size)
        })?;
        let mut bytes = vec![0u8; size.max(1)];
        // SAFETY: `bytes` has the `size` bytes NVRTC said the log takes.
        check("nvrtcGetProgramLog", unsafe {
            sys::nvrtcGetProgramLog(self.0, bytes.as_mut_ptr().cast())
        })?;
        Ok(text_until_nul(bytes))
    }

    fn ptx(&self) -> Result<String, Error> {
        let mut size = 0usize;
        // SAFETY: the program is live and compiled; `size` is a live local.
        check("nvrtcGetPTXSize", unsafe {
            sys::nvrtcGetPTXSize(self.0, &mut size)
        })?;
        let mut bytes = vec![0u8; size.max(1)];
        // SAFETY: `bytes` has the `size` bytes NVRTC said the PTX takes.
        check("nvrtcGetPTX", unsafe {
            sys::nvrtcGetPTX(self.0, bytes.as_mut_ptr().cast())
        })?;
        Ok(text_until_nul(bytes))
    }

    fn cubin(&self) -> Result<Vec<u8>, Error> {
        let mut size = 0usize;
        // SAFETY: the program is live and compiled; `size` is a live local.
        check("nvrtcGetCUBINSize", unsafe {
            sys::nvrtcGetCUBINSize(self.0, &mut size)
        })?;
        let mut bytes = vec![0u8; size];
        if size > 0 {
            // SAFETY: `bytes` has the `size` bytes NVRTC said the cubin takes.
            check("nvrtcGetCUBIN", unsafe {
                sys::nvrtcGetCUBIN(self.0, bytes.as_mut_ptr().cast())
            })?;
        }
        Ok(bytes)
    }

    fn lowered_name(&self, name_expression: &CStr) -> Result<String, Error> {
        let mut lowered: *const c_char = ptr::null();
        // SAFETY: the program is live and compiled with this name expression
        // added; NVRTC points `lowered` at a string the program owns.
        check("nvrtcGetLoweredName", unsafe {
            sys::nvrtcGetLoweredName(self.0, name_expression.as_ptr(), &mut lowered)
        })?;
        if lowered.is_null() {
            return Err(Error::Nvrtc {
                call: "nvrtcGetLoweredName",
                message: "it returned no name".into(),
            });
        }
        // SAFETY: non-null, NUL-terminated, and owned by the program, which
        // is alive until after the copy.
        Ok(unsafe { CStr::from_ptr(lowered) }
            .to_string_lossy()
            .into_owned())
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `nvrtcCreateProgram` and is
        // destroyed once, here.
        let status = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        if status != nvrtcResult::NVRTC_SUCCESS {
            log::warn!("nvrtcDestroyProgram failed: {}", describe(status));
        }
    }
}

fn check(call: &'static str, status: nvrtcResult) -> Result<(), Error> {
    if status == nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::Nvrtc {
            call,
            message: describe(status),
        })
    }
}

/// NVRTC's own name for `status`.
fn describe(status: nvrtcResult) -> String {
    // SAFETY: NVRTC is loaded whenever a status exists to describe; the
    // returned string is static inside NVRTC.
    let text = unsafe { sys::nvrtcGetErrorString(status) };
    if text.is_null() {
        format!("{status:?}")
    } else {
        // SAFETY: non-null and NUL-terminated, static in NVRTC.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

fn c_string(what: &str, text: &str) -> Result<CString, Error> {
    CString::new(text).map_err(|error| {
        Error::Invalid(format!(
            "{what} holds a NUL byte at offset {}, which NVRTC cannot take",
            error.nul_position()
        ))
    })
}

fn text_until_nul(mut bytes: Vec<u8>) -> String {
    if let Some(end) = bytes.iter().position(|&byte| byte == 0) {
        bytes.truncate(end);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}
