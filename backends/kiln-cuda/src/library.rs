//! Finding NVRTC and the driver at run time, before cudarc touches them.
//!
//! cudarc opens its libraries by name on first use and panics when none of
//! its names opens, or when a function is missing. kiln-cuda must answer a
//! missing library with an error value instead, so every entry point that
//! reaches cudarc first calls [`nvrtc`] or [`driver`] here: they open the
//! library the way cudarc will, check every function kiln-cuda calls, and
//! say where they looked when they fail.
//!
//! # Where NVRTC is looked for
//!
//! 1. `KILN_NVRTC_PATH`, when set: the library file itself, or a directory
//!    holding `libnvrtc.so.13`. Nothing else is tried: a path that was given
//!    and does not open is a mistake to report, not to paper over.
//! 2. The dynamic linker's search (`LD_LIBRARY_PATH`, the `ldconfig` cache,
//!    the system directories), under every name cudarc tries.
//! 3. The usual toolkit directories: `$CUDA_HOME/lib64`, `$CUDA_PATH/lib64`,
//!    `/usr/local/cuda/lib64`, `/usr/local/cuda/targets/x86_64-linux/lib`,
//!    `/opt/cuda/lib64`.
//!
//! A library opened by path (1 and 3) stays open for the life of the
//! process, and so does the `libnvrtc-builtins` beside it: the dynamic
//! linker matches a later open by name against the sonames already loaded,
//! which is how cudarc's open by name and NVRTC's own open of its builtins
//! find these copies without `LD_LIBRARY_PATH`.

use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use kiln_engine::store::LibraryFile;
use libloading::Library;

use crate::error::{CudaLibrary, Error};

/// The environment variable that says where NVRTC is.
pub const NVRTC_PATH_VARIABLE: &str = "KILN_NVRTC_PATH";

/// Every NVRTC function kiln-cuda calls.
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcGetErrorString",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
    "nvrtcCreateProgram",
    "nvrtcDestroyProgram",
    "nvrtcAddNameExpression",
    "nvrtcCompileProgram",
    "nvrtcGetLoweredName",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
];

/// Every driver function kiln-cuda calls, directly or through cudarc's
/// context, under the names cudarc looks them up by.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuLaunchKernel",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
];

/// A library that is open and that cudarc will find: where it came from,
/// and the file the dynamic linker really loaded.
#[derive(Debug)]
pub struct OpenedLibrary {
    library: CudaLibrary,
    origin: String,
    /// The file holding the functions cudarc calls, as the dynamic linker
    /// reports it; `None` when it does not say.
    file: Option<PathBuf>,
    /// That file by its bytes, read when first asked for.
    identity: OnceLock<LibraryFile>,
    /// Keeps the library (and, when it was opened by path, its companions)
    /// loaded for the life of the process, so that cudarc's open by name
    /// finds this copy.
    _pinned: Vec<Library>,
}

impl OpenedLibrary {
    /// Which library this is.
    pub fn library(&self) -> CudaLibrary {
        self.library
    }

    /// Where it was found: a path, or the name the dynamic linker resolved.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The file the functions cudarc calls were loaded from, links
    /// followed: the copy in use, which may not be [`origin`](Self::origin)
    /// when the dynamic linker resolves the name to another.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The loaded file by its name and the digest of its bytes: the
    /// compiler's identity in keys (P1), since NVRTC reports only
    /// `major.minor`. Read on the first call (NVRTC's library is about
    /// 110 MB) and kept for the life of the process; a file that cannot be
    /// read gives an identity no other process shares.
    pub fn file_identity(&self) -> &LibraryFile {
        self.identity.get_or_init(|| {
            let path = self
                .file
                .clone()
                .unwrap_or_else(|| PathBuf::from(&self.origin));
            LibraryFile::identify(&path)
        })
    }
}

/// NVRTC, opened once per process.
///
/// # Errors
///
/// [`Error::LibraryMissing`] naming every place looked at, or
/// [`Error::SymbolMissing`] for a library too old.
pub fn nvrtc() -> Result<&'static OpenedLibrary, Error> {
    static NVRTC: OnceLock<Result<OpenedLibrary, Error>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            let configured = std::env::var_os(NVRTC_PATH_VARIABLE)
                .filter(|value| !value.is_empty())
                .map(PathBuf::from);
            open_nvrtc(configured.as_deref(), &toolkit_directories())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The CUDA driver, opened once per process.
///
/// # Errors
///
/// [`Error::LibraryMissing`] naming every place looked at, or
/// [`Error::SymbolMissing`] for a driver too old.
pub fn driver() -> Result<&'static OpenedLibrary, Error> {
    static DRIVER: OnceLock<Result<OpenedLibrary, Error>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let directories = [
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64",
                "/usr/lib/wsl/lib",
                "/usr/local/cuda/compat",
            ]
            .map(PathBuf::from);
            open(
                CudaLibrary::Driver,
                &["cuda", "nvcuda"],
                &["libcuda.so.1", "libcuda.so"],
                None,
                &directories,
                DRIVER_SYMBOLS,
            )
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Opens NVRTC from `configured` (a file or a directory) when given, else
/// by name, else from `directories`. Not cached: the tests call it with
/// paths of their own.
///
/// # Errors
///
/// As [`nvrtc`].
pub fn open_nvrtc(
    configured: Option<&Path>,
    directories: &[PathBuf],
) -> Result<OpenedLibrary, Error> {
    open(
        CudaLibrary::Nvrtc,
        &["nvrtc"],
        &["libnvrtc.so.13", "libnvrtc.so"],
        configured,
        directories,
        NVRTC_SYMBOLS,
    )
}

fn toolkit_directories() -> Vec<PathBuf> {
    let mut directories = Vec::new();
    for variable in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(variable).filter(|root| !root.is_empty()) {
            directories.push(PathBuf::from(root).join("lib64"));
        }
    }
    directories.extend(
        [
            "/usr/local/cuda/lib64",
            "/usr/local/cuda/targets/x86_64-linux/lib",
            "/opt/cuda/lib64",
        ]
        .map(PathBuf::from),
    );
    directories
}

fn open(
    library: CudaLibrary,
    cudarc_names: &[&str],
    file_names: &[&str],
    configured: Option<&Path>,
    directories: &[PathBuf],
    symbols: &[&'static str],
) -> Result<OpenedLibrary, Error> {
    let mut searched = Vec::new();
    let mut pinned = Vec::new();
    let mut origin = None;

    if let Some(configured) = configured {
        let candidates = if configured.is_dir() {
            file_names
                .iter()
                .map(|name| configured.join(name))
                .collect()
        } else {
            vec![configured.to_path_buf()]
        };
        for candidate in candidates {
            match open_path(&candidate) {
                Ok(opened) => {
                    pinned.push(opened);
                    pinned.extend(open_companions(library, &candidate));
                    origin = Some(candidate.display().to_string());
                    break;
                }
                Err(reason) => searched.push(format!(
                    "{NVRTC_PATH_VARIABLE}: {} ({reason})",
                    candidate.display()
                )),
            }
        }
        if origin.is_none() {
            return Err(Error::LibraryMissing { library, searched });
        }
    }

    if origin.is_none() {
        // The names cudarc itself will try, in its order: whichever opens
        // here is the copy cudarc will use.
        if let Some(name) = first_opening_name(cudarc_names) {
            origin = Some(name);
        } else {
            searched.push(format!(
                "the dynamic linker's path (LD_LIBRARY_PATH, ldconfig) under {}",
                summarize(&cudarc_candidates(cudarc_names))
            ));
        }
    }

    if origin.is_none() {
        'directories: for directory in directories {
            for name in file_names {
                let candidate = directory.join(name);
                if !candidate.exists() {
                    continue;
                }
                match open_path(&candidate) {
                    Ok(opened) => {
                        pinned.push(opened);
                        pinned.extend(open_companions(library, &candidate));
                        origin = Some(candidate.display().to_string());
                        break 'directories;
                    }
                    Err(reason) => searched.push(format!("{} ({reason})", candidate.display())),
                }
            }
        }
        if origin.is_none() {
            searched.push(format!(
                "the directories {}",
                directories
                    .iter()
                    .map(|directory| directory.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            return Err(Error::LibraryMissing { library, searched });
        }
    }
    let origin = origin.expect("every branch above found the library or returned");

    // A copy opened by path is found by cudarc only through its soname.
    let Some(resolved) = first_opening_name(cudarc_names) else {
        searched.push(format!(
            "{origin}, which opens, but under none of the names cudarc resolves ({})",
            summarize(&cudarc_candidates(cudarc_names))
        ));
        return Err(Error::LibraryMissing { library, searched });
    };
    // SAFETY: the name was just opened successfully by `first_opening_name`;
    // opening it again only takes another reference to the loaded copy.
    let used = unsafe { Library::new(&resolved) }.map_err(|error| Error::LibraryMissing {
        library,
        searched: vec![format!("{resolved} ({error})")],
    })?;
    for &symbol in symbols {
        // SAFETY: the symbol is only looked up, as an untyped address, and
        // never called through this handle.
        let found = unsafe { used.get::<*const ()>(symbol.as_bytes()) }.is_ok();
        if !found {
            return Err(Error::SymbolMissing {
                library,
                path: origin,
                symbol,
            });
        }
    }
    if let Some(opened_by_path) = pinned.first() {
        let first = symbols[0].as_bytes();
        // SAFETY: both lookups only read addresses, which are compared and
        // never called.
        let same = unsafe {
            match (
                opened_by_path.get::<*const ()>(first),
                used.get::<*const ()>(first),
            ) {
                (Ok(ours), Ok(theirs)) => *ours == *theirs,
                _ => false,
            }
        };
        if !same {
            log::warn!(
                "{library}: {origin} was opened, but the dynamic linker resolves `{resolved}` \
                 to another copy, which is the one used; remove it from the linker's path to \
                 use {origin}"
            );
        }
    }
    // The copy cudarc calls into is the one `used` resolves; where it came
    // from is asked of the dynamic linker, which may have found another
    // copy than the one opened by path.
    // SAFETY: the lookup only reads an address, which is handed to dladdr
    // while `used` keeps its library loaded, and never called.
    let file = unsafe { used.get::<*const c_void>(symbols[0].as_bytes()) }
        .ok()
        // SAFETY: `used` keeps the library holding the address loaded.
        .and_then(|address| unsafe { LibraryFile::containing(*address) });
    pinned.push(used);
    Ok(OpenedLibrary {
        library,
        origin,
        file,
        identity: OnceLock::new(),
        _pinned: pinned,
    })
}

fn cudarc_candidates(cudarc_names: &[&str]) -> Vec<String> {
    cudarc_names
        .iter()
        .flat_map(|name| cudarc::get_lib_name_candidates(name))
        .collect()
}

/// The Linux names among `names`, once each, and how many others there
/// are: cudarc's list repeats itself and spans every platform's naming.
fn summarize(names: &[String]) -> String {
    let mut linux: Vec<&str> = Vec::new();
    let mut others = 0;
    for name in names {
        if linux.contains(&name.as_str()) {
            continue;
        }
        if name.contains(".so") && !name.contains("64") {
            linux.push(name);
        } else {
            others += 1;
        }
    }
    format!(
        "the names {} (and {others} other spellings)",
        linux.join(" ")
    )
}

/// The first of cudarc's names the dynamic linker opens, closed again.
fn first_opening_name(cudarc_names: &[&str]) -> Option<String> {
    cudarc_candidates(cudarc_names).into_iter().find(|name| {
        // SAFETY: opening a CUDA library runs its initializers, which have no
        // preconditions; this is what cudarc does on first use anyway.
        unsafe { Library::new(name) }.is_ok()
    })
}

fn open_path(path: &Path) -> Result<Library, String> {
    // SAFETY: as in `first_opening_name`: a CUDA library's initializers have
    // no preconditions.
    unsafe { Library::new(path) }.map_err(|error| error.to_string())
}

/// The libraries NVRTC opens by name beside itself (its builtins), opened
/// by path so that NVRTC's own open by name finds them loaded.
fn open_companions(library: CudaLibrary, library_path: &Path) -> Vec<Library> {
    if library != CudaLibrary::Nvrtc {
        return Vec::new();
    }
    let Some(directory) = library_path.parent() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut companions: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("libnvrtc-builtins.so"))
        })
        .collect();
    companions.sort();
    companions
        .iter()
        .filter_map(|path| match open_path(path) {
            Ok(library) => Some(library),
            Err(reason) => {
                log::warn!("could not open {}: {reason}", path.display());
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_path_that_does_not_open_is_an_error_naming_it() {
        let error = open_nvrtc(Some(Path::new("/nonexistent/libnvrtc.so.13")), &[])
            .expect_err("nothing is there");
        let message = error.to_string();
        assert!(message.contains("/nonexistent/libnvrtc.so.13"), "{message}");
        assert!(message.contains("KILN_NVRTC_PATH"), "{message}");
        assert!(message.contains("pip install"), "{message}");
        assert!(matches!(
            error,
            Error::LibraryMissing {
                library: CudaLibrary::Nvrtc,
                ..
            }
        ));
    }

    #[test]
    fn a_configured_directory_is_searched_for_the_library() {
        let directory = std::env::temp_dir();
        let error = open_nvrtc(Some(&directory), &[]).expect_err("no NVRTC in the temp dir");
        let message = error.to_string();
        assert!(
            message.contains(&directory.join("libnvrtc.so.13").display().to_string()),
            "{message}"
        );
    }
}
