//! hipRTC and comgr, opened once per process, with what they say about
//! themselves: their identity and the targets they support.

use std::ffi::{CString, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use kiln_engine::store::LibraryFile;

use crate::architecture::{Architecture, SupportedTargets};
use crate::error::{Error, Result};
use crate::key::CompilerIdentity;
use crate::result;
use crate::sys::{self, ComgrLibrary, HiprtcLibrary};

/// The opened compiler.
pub struct Toolchain {
    /// hipRTC.
    pub hiprtc: HiprtcLibrary,
    /// comgr, the compiler behind hipRTC.
    pub comgr: ComgrLibrary,
    /// What comgr can compile for.
    pub supported: SupportedTargets,
    /// `hiprtcVersion`, `major.minor`.
    hiprtc_version: String,
    /// The file hipRTC's functions were loaded from.
    hiprtc_file: PathBuf,
    /// The file comgr's functions were loaded from.
    comgr_file: PathBuf,
    /// Who compiles, part of every artifact's key: made on first use, since
    /// it digests both library files (some 80 MB).
    identity: OnceLock<CompilerIdentity>,
}

/// The process's toolchain, once opened. A failed open is not kept, so a
/// library installed later is found by the next attempt.
static TOOLCHAIN: Mutex<Option<Arc<Toolchain>>> = Mutex::new(None);

/// Held by every hipRTC and comgr call: ROCm 5's hipRTC aborts the process
/// when two threads compile at once (LLVM registers its options twice), so
/// in one process compiles run one at a time. Parallel compiles need worker
/// processes.
static SERIAL: Mutex<()> = Mutex::new(());

impl Toolchain {
    /// The process's toolchain, opening it on first use.
    ///
    /// # Errors
    ///
    /// A library is missing ([`Error::LibraryMissing`] says how to install
    /// it) or does not answer.
    pub fn get() -> Result<Arc<Self>> {
        let mut toolchain = TOOLCHAIN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(toolchain) = &*toolchain {
            return Ok(Arc::clone(toolchain));
        }
        let opened = Arc::new(Self::open()?);
        *toolchain = Some(Arc::clone(&opened));
        Ok(opened)
    }

    fn open() -> Result<Self> {
        let _serial = serial();
        let hiprtc = HiprtcLibrary::open()?;
        // SAFETY: the function lives in the hipRTC library just opened, which
        // `hiprtc` keeps loaded.
        let hiprtc_file = unsafe { LibraryFile::containing(hiprtc.hiprtcVersion as *const c_void) }
            .unwrap_or_else(|| hiprtc.path.clone());
        if file_name(&hiprtc_file).starts_with("libamdhip64.so.5") {
            // ROCm 5 keeps hipRTC's builtin headers in a library of their own;
            // without it every compile fails with an unclear message.
            drop(sys::open(&sys::HIPRTC_BUILTINS_5)?);
        }
        // Opened after hipRTC, so that the soname resolves to the comgr
        // hipRTC itself uses when it is already loaded.
        let comgr = ComgrLibrary::open()?;
        // SAFETY: the function lives in the comgr library just opened, which
        // `comgr` keeps loaded.
        let comgr_file =
            unsafe { LibraryFile::containing(comgr.amd_comgr_get_version as *const c_void) }
                .unwrap_or_else(|| comgr.path.clone());

        let (hiprtc_major, hiprtc_minor) = result::hiprtc_version(&hiprtc)?;
        let (comgr_major, comgr_minor) = result::comgr_version(&comgr);
        let comgr_version = format!("{comgr_major}.{comgr_minor}");
        let supported =
            SupportedTargets::from_isa_names(&result::isa_names(&comgr)?, comgr_version.clone());
        let hiprtc_version = format!("{hiprtc_major}.{hiprtc_minor}");
        log::debug!(
            "hipRTC {hiprtc_version} from {}, comgr {} from {}: {} targets",
            hiprtc_file.display(),
            supported.comgr_version(),
            comgr_file.display(),
            supported.processors().len()
        );
        Ok(Self {
            hiprtc,
            comgr,
            supported,
            hiprtc_version,
            hiprtc_file,
            comgr_file,
            identity: OnceLock::new(),
        })
    }

    /// Who compiles: hipRTC's and comgr's versions and library files, read
    /// and digested on the first call in the process.
    pub fn identity(&self) -> &CompilerIdentity {
        self.identity.get_or_init(|| CompilerIdentity {
            hiprtc_version: self.hiprtc_version.clone(),
            hiprtc_library: LibraryFile::identify(&self.hiprtc_file),
            comgr_version: self.supported.comgr_version().to_owned(),
            comgr_library: LibraryFile::identify(&self.comgr_file),
        })
    }

    /// Refuses a target hipRTC would abort the process on.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedArchitecture`] with every supported processor.
    pub fn check_target(&self, architecture: &Architecture) -> Result<()> {
        self.supported.check(architecture, |architecture| {
            let isa = CString::new(architecture.isa_name()).map_err(|_| Error::InteriorNul {
                what: "the architecture name".to_owned(),
            })?;
            let _serial = serial();
            result::accepts_isa(&self.comgr, &isa)
        })
    }
}

/// Holds off every other hipRTC and comgr call of the process.
pub fn serial() -> MutexGuard<'static, ()> {
    // A panic while holding the lock leaves hipRTC as usable as before: the
    // lock guards no data.
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
