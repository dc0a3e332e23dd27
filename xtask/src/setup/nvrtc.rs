//! NVRTC for the CUDA backend's compile tests, from NVIDIA's pip wheels,
//! each installed with `pip install --target` into a folder of its own
//! under `<target dir>/kiln-system`:
//!
//! - NVRTC 13 (`nvidia-cuda-nvrtc==13.0.88`), the one every test run
//!   uses: handed to the tests as `KILN_NVRTC_PATH` (which kiln-cuda
//!   honours) with `KILN_REQUIRE_NVRTC=1` (which turns the tests' "no
//!   NVRTC" skip into a failure). A `KILN_NVRTC_PATH` already set by the
//!   caller wins: nothing is installed for it and the tests use that
//!   library.
//! - NVRTC 12 (`nvidia-cuda-nvrtc-cu12==12.8.93`), against which
//!   `cargo xtask test` runs kiln-cuda's tests once more, and with which
//!   the program outside the workspace (cudarc's `cuda-12080` bindings)
//!   compiles.
//! - The CUDA 13 toolkit's headers (`nvidia-cuda-runtime==13.0.88` for
//!   `cuda_fp16.h`, `cooperative_groups.h` and the rest, and
//!   `nvidia-cuda-cccl==13.0.85` for the `cuda/std` headers they include),
//!   which kiln reads and hands to NVRTC in memory for a kernel's angle
//!   includes: handed to the tests as `KILN_CUDA_INCLUDE`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup::system_directory;

/// One NVRTC wheel and where the library lies in it.
pub struct Wheel {
    /// pip's requirements, pinned and separated by spaces: the tests'
    /// expectations (its version in keys, the architectures it lists) are
    /// those of this release.
    pub requirement: &'static str,
    /// The folder under `kiln-system` it is installed into.
    folder: &'static str,
    /// Where the wheel puts the library (for the headers, the header whose
    /// presence says they are installed), inside the install folder.
    library: &'static str,
}

/// The CUDA 13.0 toolkit's headers, for the kernels' angle includes.
pub const CUDA_HEADERS_13: Wheel = Wheel {
    requirement: "nvidia-cuda-runtime==13.0.88 nvidia-cuda-cccl==13.0.85",
    folder: "cuda-headers-13.0.88",
    library: "nvidia/cu13/include/cuda_runtime.h",
};

impl Wheel {
    /// The include folder of an installed headers wheel.
    pub fn include_folder(&self) -> PathBuf {
        self.library()
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.install_folder())
    }
}

/// What the tests need to find the toolkit's headers: a `KILN_CUDA_INCLUDE`
/// already set by the caller wins.
pub fn headers_environment() -> Vec<(String, String)> {
    if std::env::var_os("KILN_CUDA_INCLUDE").is_some_and(|value| !value.is_empty()) {
        return Vec::new();
    }
    vec![(
        "KILN_CUDA_INCLUDE".to_owned(),
        CUDA_HEADERS_13.include_folder().display().to_string(),
    )]
}

/// NVRTC 13.0, the default of every test run.
pub const NVRTC_13: Wheel = Wheel {
    requirement: "nvidia-cuda-nvrtc==13.0.88",
    folder: "nvrtc-13.0.88",
    library: "nvidia/cu13/lib/libnvrtc.so.13",
};

/// NVRTC 12.8, the CUDA 12 the second run of kiln-cuda's tests uses.
pub const NVRTC_12: Wheel = Wheel {
    requirement: "nvidia-cuda-nvrtc-cu12==12.8.93",
    folder: "nvrtc-12.8.93",
    library: "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
};

impl Wheel {
    fn install_folder(&self) -> PathBuf {
        system_directory().join(self.folder)
    }

    /// The library file the tests should load.
    pub fn library(&self) -> PathBuf {
        self.install_folder().join(self.library)
    }

    /// Whether the wheel is installed.
    pub fn is_installed(&self) -> bool {
        self.library().is_file()
    }

    /// Installs the wheel with pip into a staging folder, then renames it
    /// into place, so an interrupted install never looks present.
    pub fn install(&self) -> Result<()> {
        let requirement = self.requirement;
        let python = python_with_pip()?;
        let folder = self.install_folder();
        let staging = system_directory().join(format!("{}.partial", self.folder));
        if staging.exists() {
            std::fs::remove_dir_all(&staging)
                .with_context(|| format!("could not clear {}", staging.display()))?;
        }
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("could not create {}", staging.display()))?;
        let pip = |extra: &[&str]| -> Result<std::process::Output> {
            let mut command = Command::new(&python);
            command
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--disable-pip-version-check",
                ])
                .args(["--no-input", "--quiet", "--target"])
                .arg(&staging)
                .args(extra)
                .args(requirement.split_whitespace());
            eprintln!(
                "xtask: setup: {python} -m pip install --target {} {requirement}",
                staging.display()
            );
            command.output().context("could not run pip")
        };
        let mut output = pip(&[])?;
        if !output.status.success()
            && String::from_utf8_lossy(&output.stderr).contains("externally-managed-environment")
        {
            // A distribution's Python refuses pip by default; the install
            // goes to a folder of its own, so the system's packages are
            // untouched.
            output = pip(&["--break-system-packages"])?;
        }
        if !output.status.success() {
            bail!(
                "pip could not install {requirement} ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        if !staging.join(self.library).is_file() {
            bail!(
                "{requirement} installed, but {} is not in it: the wheel's layout changed; \
                 update xtask/src/setup/nvrtc.rs",
                self.library
            );
        }
        if folder.exists() {
            std::fs::remove_dir_all(&folder)
                .with_context(|| format!("could not replace {}", folder.display()))?;
        }
        std::fs::rename(&staging, &folder)
            .with_context(|| format!("could not move the install to {}", folder.display()))?;
        eprintln!(
            "xtask: setup: {requirement} is at {}",
            self.library().display()
        );
        Ok(())
    }
}

fn configured() -> Option<PathBuf> {
    std::env::var_os("KILN_NVRTC_PATH")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// Whether the caller's `KILN_NVRTC_PATH` or the installed NVRTC 13 is
/// there.
pub fn is_present() -> bool {
    match configured() {
        Some(path) => path.exists(),
        None => NVRTC_13.is_installed(),
    }
}

/// What the tests need to find NVRTC and to refuse to skip without it.
pub fn environment() -> Vec<(String, String)> {
    let mut environment = vec![
        ("KILN_REQUIRE_NVRTC".to_owned(), "1".to_owned()),
        // NVIDIA's compute cache hands back a cubin it built before without
        // ptxas's report; with it off, every compile reports its spills, and
        // the resource tests check them instead of skipping.
        ("CUDA_CACHE_DISABLE".to_owned(), "1".to_owned()),
    ];
    if configured().is_none() {
        environment.push((
            "KILN_NVRTC_PATH".to_owned(),
            NVRTC_13.library().display().to_string(),
        ));
    }
    environment
}

/// Installs NVRTC 13, unless the caller named another.
pub fn install() -> Result<()> {
    if let Some(path) = configured() {
        bail!(
            "KILN_NVRTC_PATH={} does not exist; unset it to let setup install NVRTC, or point \
             it at libnvrtc.so.13",
            path.display()
        );
    }
    NVRTC_13.install()
}

/// A Python that has pip, installing pip with apt when this is a Debian or
/// Ubuntu machine without it and setup runs as root.
fn python_with_pip() -> Result<String> {
    let has_pip = |python: &str| {
        Command::new(python)
            .args(["-m", "pip", "--version"])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    for python in ["python3", "python"] {
        if has_pip(python) {
            return Ok(python.to_owned());
        }
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0");
    let has_apt = Command::new("apt-get").arg("--version").output().is_ok();
    if is_root && has_apt {
        eprintln!("xtask: setup: no pip; installing python3-pip with apt-get");
        for arguments in [
            &["update", "-qq"][..],
            &["install", "-y", "-qq", "python3-pip"][..],
        ] {
            let status = Command::new("apt-get")
                .args(arguments)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .context("could not run apt-get")?;
            if !status.success() {
                bail!("apt-get {} failed ({status})", arguments.join(" "));
            }
        }
        if has_pip("python3") {
            return Ok("python3".to_owned());
        }
    }
    bail!(
        "NVRTC is installed from PyPI with pip, and this machine has no Python with pip: \
         install python3-pip, or set KILN_NVRTC_PATH to an NVRTC 13 (libnvrtc.so.13)"
    )
}
