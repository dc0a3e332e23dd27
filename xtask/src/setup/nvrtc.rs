//! NVRTC for the CUDA backend's compile tests: the pip wheel
//! `nvidia-cuda-nvrtc==13.0.88`, installed with `pip install --target` into
//! `<target dir>/kiln-system/nvrtc-13.0.88`, and handed to the tests as
//! `KILN_NVRTC_PATH` (which kiln-cuda honours) with `KILN_REQUIRE_NVRTC=1`
//! (which turns the tests' "no NVRTC" skip into a failure).
//!
//! A `KILN_NVRTC_PATH` already set by the caller wins: nothing is installed
//! and the tests use that library.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::setup::system_directory;

/// The wheel, pinned: the tests' expectations (its version in keys, the
/// architectures it lists) are those of this release.
const WHEEL: &str = "nvidia-cuda-nvrtc==13.0.88";

/// Where the wheel puts the library, inside the install folder.
const LIBRARY: &str = "nvidia/cu13/lib/libnvrtc.so.13";

fn install_folder() -> PathBuf {
    system_directory().join("nvrtc-13.0.88")
}

/// The library kiln-cuda's tests should load.
pub fn library() -> PathBuf {
    install_folder().join(LIBRARY)
}

fn configured() -> Option<PathBuf> {
    std::env::var_os("KILN_NVRTC_PATH")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// Whether the caller's `KILN_NVRTC_PATH` or the installed wheel is there.
pub fn is_present() -> bool {
    match configured() {
        Some(path) => path.exists(),
        None => library().is_file(),
    }
}

/// What the tests need to find NVRTC and to refuse to skip without it.
pub fn environment() -> Vec<(String, String)> {
    let mut environment = vec![("KILN_REQUIRE_NVRTC".to_owned(), "1".to_owned())];
    if configured().is_none() {
        environment.push((
            "KILN_NVRTC_PATH".to_owned(),
            library().display().to_string(),
        ));
    }
    environment
}

/// Installs the wheel with pip into a staging folder, then renames it into
/// place, so an interrupted install never looks present.
pub fn install() -> Result<()> {
    if let Some(path) = configured() {
        bail!(
            "KILN_NVRTC_PATH={} does not exist; unset it to let setup install NVRTC, or point \
             it at libnvrtc.so.13",
            path.display()
        );
    }
    let python = python_with_pip()?;
    let folder = install_folder();
    let staging = system_directory().join("nvrtc-13.0.88.partial");
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
            .arg(WHEEL);
        eprintln!(
            "xtask: setup: {python} -m pip install --target {} {WHEEL}",
            staging.display()
        );
        command.output().context("could not run pip")
    };
    let mut output = pip(&[])?;
    if !output.status.success()
        && String::from_utf8_lossy(&output.stderr).contains("externally-managed-environment")
    {
        // A distribution's Python refuses pip by default; the install goes
        // to a folder of its own, so the system's packages are untouched.
        output = pip(&["--break-system-packages"])?;
    }
    if !output.status.success() {
        bail!(
            "pip could not install {WHEEL} ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if !staging.join(LIBRARY).is_file() {
        bail!(
            "{WHEEL} installed, but {LIBRARY} is not in it: the wheel's layout changed; \
             update xtask/src/setup/nvrtc.rs"
        );
    }
    if folder.exists() {
        std::fs::remove_dir_all(&folder)
            .with_context(|| format!("could not replace {}", folder.display()))?;
    }
    std::fs::rename(&staging, &folder)
        .with_context(|| format!("could not move the install to {}", folder.display()))?;
    eprintln!("xtask: setup: NVRTC is at {}", library().display());
    Ok(())
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
