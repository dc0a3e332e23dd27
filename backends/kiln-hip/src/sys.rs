//! The raw C interfaces kiln-hip uses — hipRTC, comgr and the HIP runtime —
//! opened at run time, so that building kiln needs no ROCm.
//!
//! Nothing here checks a status or owns a handle: [`crate::result`] turns
//! every call into a `Result`, and the safe types above it release what they
//! own. Each library is looked for under the names its ROCm releases use,
//! first through the dynamic loader's own search and then in the usual ROCm
//! directories; a library that is nowhere becomes an [`Error`] that says
//! what was looked for, where, and how to install it.

#![allow(
    non_camel_case_types,
    non_snake_case,
    reason = "the C names are kept, so the code reads against the ROCm headers"
)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::error::Error;

/// hipRTC's status code; `0` is success.
pub type hiprtcResult = c_int;
/// hipRTC's success status.
pub const HIPRTC_SUCCESS: hiprtcResult = 0;
/// hipRTC's status for a program that failed to compile: its log says why.
pub const HIPRTC_ERROR_COMPILATION: hiprtcResult = 6;
/// hipRTC's status for a name expression it cannot lower: not a kernel.
pub const HIPRTC_ERROR_NAME_EXPRESSION_NOT_VALID: hiprtcResult = 10;
/// A hipRTC program.
pub type hiprtcProgram = *mut c_void;

/// comgr's status code; `0` is success.
pub type amd_comgr_status_t = c_int;
/// comgr's success status.
pub const AMD_COMGR_STATUS_SUCCESS: amd_comgr_status_t = 0;
/// comgr's status for an argument it does not accept, such as an ISA name
/// it does not know.
pub const AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT: amd_comgr_status_t = 2;

/// A comgr metadata node, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct amd_comgr_metadata_node_t {
    /// comgr's handle.
    pub handle: u64,
}

/// The HIP runtime's status code; `0` is success.
pub type hipError_t = c_int;
/// The HIP runtime's success status.
pub const HIP_SUCCESS: hipError_t = 0;
/// A loaded code object.
pub type hipModule_t = *mut c_void;
/// A kernel inside a loaded code object.
pub type hipFunction_t = *mut c_void;
/// A stream; null is the device's default stream.
pub type hipStream_t = *mut c_void;
/// `hipStreamCreateWithFlags`'s flag for a stream that does not wait for
/// the default stream, as cudarc's and HIP programs' streams are.
pub const HIP_STREAM_NON_BLOCKING: c_uint = 1;
/// A device address.
pub type hipDeviceptr_t = *mut c_void;

/// Where to look for one library, and what to tell a user who has none.
pub struct LibrarySearch {
    /// What the library is, for messages.
    pub what: &'static str,
    /// The file names to try, in order of preference.
    pub names: &'static [&'static str],
    /// How to install it.
    pub install: &'static str,
}

/// hipRTC lives in `libhiprtc.so` from ROCm 6 on, and inside the HIP runtime
/// `libamdhip64.so.5` on ROCm 5.
pub const HIPRTC: LibrarySearch = LibrarySearch {
    what: "hipRTC",
    names: &[
        "libhiprtc.so",
        "libhiprtc.so.7",
        "libhiprtc.so.6",
        "libamdhip64.so.5",
    ],
    install: "install ROCm 6 or later (it ships libhiprtc.so), or on Debian: \
              apt-get install libamdhip64-5 libhiprtc-builtins5 libamd-comgr2",
};

/// The headers and builtins hipRTC compiles against; ROCm 5 keeps them in a
/// library of their own, without which every compile fails.
pub const HIPRTC_BUILTINS_5: LibrarySearch = LibrarySearch {
    what: "the hipRTC builtins",
    names: &["libhiprtc-builtins.so.5"],
    install: "on Debian: apt-get install libhiprtc-builtins5",
};

/// The code object manager: the compiler behind hipRTC, and the one that
/// knows which targets it can compile for.
pub const COMGR: LibrarySearch = LibrarySearch {
    what: "comgr (the AMD code object manager)",
    names: &["libamd_comgr.so.2", "libamd_comgr.so.3", "libamd_comgr.so"],
    install: "install ROCm, or on Debian: apt-get install libamd-comgr2",
};

/// The HIP runtime: devices, modules and launches.
pub const HIP_RUNTIME: LibrarySearch = LibrarySearch {
    what: "the HIP runtime",
    names: &[
        "libamdhip64.so",
        "libamdhip64.so.7",
        "libamdhip64.so.6",
        "libamdhip64.so.5",
    ],
    install: "install ROCm, or on Debian: apt-get install libamdhip64-5",
};

/// Opens the first library `search` names that exists.
///
/// # Errors
///
/// [`Error::LibraryMissing`] naming every file and directory tried.
pub fn open(search: &LibrarySearch) -> Result<(Library, PathBuf), Error> {
    let mut directories: Vec<PathBuf> = Vec::new();
    for variable in ["ROCM_PATH", "HIP_PATH"] {
        if let Some(root) = std::env::var_os(variable) {
            directories.push(Path::new(&root).join("lib"));
        }
    }
    directories.push(PathBuf::from("/opt/rocm/lib"));
    directories.dedup();

    // The error worth showing is one from a file that exists and would not
    // load (a missing dependency, a broken file); "no such file" is shown
    // only when nothing better was seen.
    let mut detail: Option<String> = None;
    let mut last_error = String::new();
    // The loader's own search comes first: it honours LD_LIBRARY_PATH and
    // the ld.so cache, which is where a distribution's packages are.
    let candidates = search.names.iter().map(PathBuf::from).chain(
        directories
            .iter()
            .flat_map(|directory| search.names.iter().map(|name| directory.join(name))),
    );
    for candidate in candidates {
        // SAFETY: opening a ROCm library runs its initializers, which only
        // set up the library's own state; the names are the ROCm libraries'.
        match unsafe { Library::new(&candidate) } {
            Ok(library) => return Ok((library, candidate)),
            Err(error) => {
                last_error = error.to_string();
                if detail.is_none() && !last_error.contains("No such file or directory") {
                    detail = Some(last_error.clone());
                }
            }
        }
    }
    let searched = std::iter::once(
        "the dynamic loader's search path (LD_LIBRARY_PATH, /etc/ld.so.cache, /lib, /usr/lib)"
            .to_owned(),
    )
    .chain(
        directories
            .iter()
            .map(|directory| directory.display().to_string()),
    )
    .collect::<Vec<_>>()
    .join(", ");
    Err(Error::LibraryMissing {
        library: search.what,
        names: search.names.iter().map(|name| (*name).to_owned()).collect(),
        searched,
        install: search.install,
        detail: detail.unwrap_or(last_error),
    })
}

/// Copies the function `name` (NUL-terminated) out of `library`.
///
/// # Safety
///
/// `F` must be the function pointer type of the C declaration of `name`.
unsafe fn function<F: Copy>(
    library: &Library,
    path: &Path,
    name: &'static str,
) -> Result<F, Error> {
    // SAFETY: the caller vouches for `F`; the pointer is only used while the
    // struct holding it also holds `library`.
    let symbol =
        unsafe { library.get::<F>(name.as_bytes()) }.map_err(|error| Error::SymbolMissing {
            path: path.to_path_buf(),
            symbol: name.trim_end_matches('\0'),
            detail: error.to_string(),
        })?;
    Ok(*symbol)
}

/// hipRTC's functions.
pub struct HiprtcLibrary {
    /// Where it was opened from.
    pub path: PathBuf,
    pub hiprtcGetErrorString: unsafe extern "C" fn(hiprtcResult) -> *const c_char,
    pub hiprtcVersion: unsafe extern "C" fn(*mut c_int, *mut c_int) -> hiprtcResult,
    pub hiprtcCreateProgram: unsafe extern "C" fn(
        *mut hiprtcProgram,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> hiprtcResult,
    pub hiprtcDestroyProgram: unsafe extern "C" fn(*mut hiprtcProgram) -> hiprtcResult,
    pub hiprtcAddNameExpression: unsafe extern "C" fn(hiprtcProgram, *const c_char) -> hiprtcResult,
    pub hiprtcCompileProgram:
        unsafe extern "C" fn(hiprtcProgram, c_int, *const *const c_char) -> hiprtcResult,
    pub hiprtcGetProgramLogSize: unsafe extern "C" fn(hiprtcProgram, *mut usize) -> hiprtcResult,
    pub hiprtcGetProgramLog: unsafe extern "C" fn(hiprtcProgram, *mut c_char) -> hiprtcResult,
    pub hiprtcGetCodeSize: unsafe extern "C" fn(hiprtcProgram, *mut usize) -> hiprtcResult,
    pub hiprtcGetCode: unsafe extern "C" fn(hiprtcProgram, *mut c_char) -> hiprtcResult,
    pub hiprtcGetLoweredName:
        unsafe extern "C" fn(hiprtcProgram, *const c_char, *mut *const c_char) -> hiprtcResult,
    _library: Library,
}

impl HiprtcLibrary {
    /// Opens hipRTC.
    ///
    /// # Errors
    ///
    /// The library or one of its functions is missing.
    pub fn open() -> Result<Self, Error> {
        let (library, path) = open(&HIPRTC)?;
        // SAFETY: each type below is the function's C declaration in
        // hip/hiprtc.h, unchanged from ROCm 5 to ROCm 6.
        unsafe {
            Ok(Self {
                hiprtcGetErrorString: function(&library, &path, "hiprtcGetErrorString\0")?,
                hiprtcVersion: function(&library, &path, "hiprtcVersion\0")?,
                hiprtcCreateProgram: function(&library, &path, "hiprtcCreateProgram\0")?,
                hiprtcDestroyProgram: function(&library, &path, "hiprtcDestroyProgram\0")?,
                hiprtcAddNameExpression: function(&library, &path, "hiprtcAddNameExpression\0")?,
                hiprtcCompileProgram: function(&library, &path, "hiprtcCompileProgram\0")?,
                hiprtcGetProgramLogSize: function(&library, &path, "hiprtcGetProgramLogSize\0")?,
                hiprtcGetProgramLog: function(&library, &path, "hiprtcGetProgramLog\0")?,
                hiprtcGetCodeSize: function(&library, &path, "hiprtcGetCodeSize\0")?,
                hiprtcGetCode: function(&library, &path, "hiprtcGetCode\0")?,
                hiprtcGetLoweredName: function(&library, &path, "hiprtcGetLoweredName\0")?,
                path,
                _library: library,
            })
        }
    }
}

/// comgr's functions.
pub struct ComgrLibrary {
    /// Where it was opened from.
    pub path: PathBuf,
    pub amd_comgr_get_version: unsafe extern "C" fn(*mut usize, *mut usize),
    pub amd_comgr_get_isa_count: unsafe extern "C" fn(*mut usize) -> amd_comgr_status_t,
    pub amd_comgr_get_isa_name:
        unsafe extern "C" fn(usize, *mut *const c_char) -> amd_comgr_status_t,
    pub amd_comgr_get_isa_metadata:
        unsafe extern "C" fn(*const c_char, *mut amd_comgr_metadata_node_t) -> amd_comgr_status_t,
    pub amd_comgr_destroy_metadata:
        unsafe extern "C" fn(amd_comgr_metadata_node_t) -> amd_comgr_status_t,
    _library: Library,
}

impl ComgrLibrary {
    /// Opens comgr.
    ///
    /// # Errors
    ///
    /// The library or one of its functions is missing.
    pub fn open() -> Result<Self, Error> {
        let (library, path) = open(&COMGR)?;
        // SAFETY: each type below is the function's C declaration in
        // amd_comgr.h, stable across comgr 2 and 3.
        unsafe {
            Ok(Self {
                amd_comgr_get_version: function(&library, &path, "amd_comgr_get_version\0")?,
                amd_comgr_get_isa_count: function(&library, &path, "amd_comgr_get_isa_count\0")?,
                amd_comgr_get_isa_name: function(&library, &path, "amd_comgr_get_isa_name\0")?,
                amd_comgr_get_isa_metadata: function(
                    &library,
                    &path,
                    "amd_comgr_get_isa_metadata\0",
                )?,
                amd_comgr_destroy_metadata: function(
                    &library,
                    &path,
                    "amd_comgr_destroy_metadata\0",
                )?,
                path,
                _library: library,
            })
        }
    }
}

/// The HIP runtime's functions.
pub struct HipLibrary {
    /// Where it was opened from.
    pub path: PathBuf,
    pub hipInit: unsafe extern "C" fn(c_uint) -> hipError_t,
    pub hipGetDeviceCount: unsafe extern "C" fn(*mut c_int) -> hipError_t,
    pub hipSetDevice: unsafe extern "C" fn(c_int) -> hipError_t,
    pub hipGetDeviceProperties: unsafe extern "C" fn(*mut c_void, c_int) -> hipError_t,
    pub hipGetErrorName: unsafe extern "C" fn(hipError_t) -> *const c_char,
    pub hipModuleLoadData: unsafe extern "C" fn(*mut hipModule_t, *const c_void) -> hipError_t,
    pub hipModuleUnload: unsafe extern "C" fn(hipModule_t) -> hipError_t,
    pub hipModuleGetFunction:
        unsafe extern "C" fn(*mut hipFunction_t, hipModule_t, *const c_char) -> hipError_t,
    #[allow(
        clippy::type_complexity,
        reason = "the C declaration, spelled out once"
    )]
    pub hipModuleLaunchKernel: unsafe extern "C" fn(
        hipFunction_t,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        hipStream_t,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> hipError_t,
    pub hipDeviceSynchronize: unsafe extern "C" fn() -> hipError_t,
    pub hipStreamCreateWithFlags: unsafe extern "C" fn(*mut hipStream_t, c_uint) -> hipError_t,
    pub hipStreamDestroy: unsafe extern "C" fn(hipStream_t) -> hipError_t,
    pub hipStreamSynchronize: unsafe extern "C" fn(hipStream_t) -> hipError_t,
    pub hipMalloc: unsafe extern "C" fn(*mut hipDeviceptr_t, usize) -> hipError_t,
    pub hipFree: unsafe extern "C" fn(hipDeviceptr_t) -> hipError_t,
    pub hipMemcpyHtoD: unsafe extern "C" fn(hipDeviceptr_t, *const c_void, usize) -> hipError_t,
    pub hipMemcpyDtoH: unsafe extern "C" fn(*mut c_void, hipDeviceptr_t, usize) -> hipError_t,
    _library: Library,
}

impl HipLibrary {
    /// Opens the HIP runtime.
    ///
    /// # Errors
    ///
    /// The library or one of its functions is missing.
    pub fn open() -> Result<Self, Error> {
        let (library, path) = open(&HIP_RUNTIME)?;
        // ROCm 6 changed the layout of hipDeviceProp_t and exports the new
        // one under its own name; kiln only scans the structure for the
        // architecture's name, so either layout serves.
        // SAFETY: both names have the declaration below.
        let properties = unsafe {
            function(&library, &path, "hipGetDevicePropertiesR0600\0")
                .or_else(|_| function(&library, &path, "hipGetDeviceProperties\0"))?
        };
        // SAFETY: each type below is the function's C declaration in
        // hip_runtime_api.h, unchanged from ROCm 5 to ROCm 6.
        unsafe {
            Ok(Self {
                hipInit: function(&library, &path, "hipInit\0")?,
                hipGetDeviceCount: function(&library, &path, "hipGetDeviceCount\0")?,
                hipSetDevice: function(&library, &path, "hipSetDevice\0")?,
                hipGetDeviceProperties: properties,
                hipGetErrorName: function(&library, &path, "hipGetErrorName\0")?,
                hipModuleLoadData: function(&library, &path, "hipModuleLoadData\0")?,
                hipModuleUnload: function(&library, &path, "hipModuleUnload\0")?,
                hipModuleGetFunction: function(&library, &path, "hipModuleGetFunction\0")?,
                hipModuleLaunchKernel: function(&library, &path, "hipModuleLaunchKernel\0")?,
                hipDeviceSynchronize: function(&library, &path, "hipDeviceSynchronize\0")?,
                hipStreamCreateWithFlags: function(&library, &path, "hipStreamCreateWithFlags\0")?,
                hipStreamDestroy: function(&library, &path, "hipStreamDestroy\0")?,
                hipStreamSynchronize: function(&library, &path, "hipStreamSynchronize\0")?,
                hipMalloc: function(&library, &path, "hipMalloc\0")?,
                hipFree: function(&library, &path, "hipFree\0")?,
                hipMemcpyHtoD: function(&library, &path, "hipMemcpyHtoD\0")?,
                hipMemcpyDtoH: function(&library, &path, "hipMemcpyDtoH\0")?,
                path,
                _library: library,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // B2
    #[test]
    fn a_missing_library_names_itself_where_it_was_looked_for_and_how_to_install_it() {
        let search = LibrarySearch {
            what: "the imaginary library",
            names: &["libkiln-imaginary.so.9"],
            install: "apt-get install kiln-imaginary",
        };
        let message = open(&search)
            .expect_err("no such library exists")
            .to_string();
        for part in [
            "the imaginary library could not be loaded",
            "libkiln-imaginary.so.9",
            "LD_LIBRARY_PATH",
            "/opt/rocm/lib",
            "apt-get install kiln-imaginary",
        ] {
            assert!(message.contains(part), "{part:?} in {message}");
        }
    }

    #[test]
    fn the_install_hints_name_the_debian_packages() {
        assert!(
            HIPRTC
                .install
                .contains("libamdhip64-5 libhiprtc-builtins5 libamd-comgr2")
        );
        assert!(COMGR.install.contains("libamd-comgr2"));
        assert!(HIP_RUNTIME.install.contains("libamdhip64-5"));
        assert!(HIPRTC.names.contains(&"libhiprtc.so"));
        assert!(HIPRTC.names.contains(&"libamdhip64.so.5"));
    }
}
