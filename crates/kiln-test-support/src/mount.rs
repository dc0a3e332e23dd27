//! A file system of a chosen size, for tests of a full disk or a
//! read-only mount. Mounting needs root or `CAP_SYS_ADMIN`; without them
//! the test says why and skips.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A tmpfs mounted for one test, unmounted when dropped.
#[derive(Debug)]
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// A tmpfs of `size` (`2m`, as `mount -o size=` reads it) at `path`,
    /// created first, or why there can be none here.
    ///
    /// # Errors
    ///
    /// The reason, when the mount point cannot be created or the mount is
    /// refused.
    pub fn mount(path: &Path, size: &str) -> Result<Self, String> {
        std::fs::create_dir_all(path)
            .map_err(|error| format!("cannot create {path:?}: {error}"))?;
        let target = c_path(path);
        let options = CString::new(format!("size={size}")).expect("a size holds no NUL");
        // SAFETY: every pointer is a NUL-terminated string alive for the
        // call; tmpfs reads its options as text.
        let status = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if status != 0 {
            return Err(format!(
                "cannot mount a {size} tmpfs (the test needs root or CAP_SYS_ADMIN): {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// As [`Tmpfs::mount`], or `None` after printing why `what` skips (a
    /// failure instead when `KILN_REQUIRE_ROOT=1`, which `cargo xtask test`
    /// sets as root, or `KILN_REQUIRE_DEVICE=1`).
    pub fn mount_or_skip(what: &str, path: &Path, size: &str) -> Option<Self> {
        match Self::mount(path, size) {
            Ok(mount) => Some(mount),
            Err(reason) => {
                crate::require::skip_unless(
                    &[crate::require::REQUIRE_ROOT, "KILN_REQUIRE_DEVICE"],
                    what,
                    &reason,
                );
                None
            }
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the mount read-only, keeping what it holds.
    pub fn remount_read_only(&self) {
        let target = c_path(&self.path);
        // SAFETY: `target` is a NUL-terminated string alive for the call;
        // a remount takes no source, type or data.
        let status = unsafe {
            libc::mount(
                std::ptr::null(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            )
        };
        assert_eq!(
            status,
            0,
            "remounting read-only: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = c_path(&self.path);
        // SAFETY: `target` is a NUL-terminated string alive for the call.
        // Detached, so a file a failed test left open cannot keep it.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("a scratch path holds no NUL")
}
