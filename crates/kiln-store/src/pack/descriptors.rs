//! The process's table of file descriptors, grown before it is needed.
//!
//! The kernel grows a process's table of descriptors as they are opened,
//! and in a process of several threads each growth waits for every
//! processor to pass a quiescent point: 10-30 ms seen on a GPU host,
//! during which every other thread that opens a file waits too. A store's
//! lookup threads open shards' files, so the table is grown once, before
//! they run: when the program starts, before it has threads (the growth
//! is then free), and again, to be sure, when the first store opens. A
//! program that made its GPU's context (whose driver starts threads)
//! before opening its store paid that wait on its warm start's clock:
//! 4-15 ms of a 3 ms start, on an H100 host.

use std::fs::File;
use std::sync::Once;

/// Past the size wanted: descriptor 255 makes a table of 256.
const WANTED: libc::c_int = 255;

/// Grows the table when the program starts, before `main` and before any
/// thread: the C library runs what `.init_array` lists at the start of a
/// program (or when a library holding this is loaded).
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static GROW_AT_START: extern "C" fn() = grow_at_start;

#[cfg(target_os = "linux")]
extern "C" fn grow_at_start() {
    grow_table();
}

/// Makes the table room for a few hundred descriptors, once per process.
/// A descriptor is duplicated at or above the size wanted and closed at
/// once: no descriptor is taken or replaced; a lower limit on descriptors
/// leaves the table as it is.
pub(super) fn grow_table() {
    static GROWN: Once = Once::new();
    // The start-up entry kept by the linker wherever this is linked: a
    // store that opens is the code that needs it.
    #[cfg(target_os = "linux")]
    std::hint::black_box(&GROW_AT_START);
    GROWN.call_once(|| {
        let Ok(root) = File::open("/") else {
            return;
        };
        // SAFETY: `fcntl` duplicates an open descriptor that outlives the
        // call into the lowest free one at or above WANTED, or fails; the
        // duplicate is this function's alone and closed at once.
        unsafe {
            let duplicate = libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&root),
                libc::F_DUPFD_CLOEXEC,
                WANTED,
            );
            if duplicate >= 0 {
                libc::close(duplicate);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    // F11: the table of descriptors is grown when the program starts,
    // before `main`: a fresh process of this test, which opens no store,
    // already has room for 256 (a program starts with 64).
    #[cfg(target_os = "linux")]
    #[test]
    fn f11_the_descriptor_table_is_grown_before_main() {
        const CHILD: &str = "KILN_TEST_DESCRIPTOR_TABLE";
        if std::env::var_os(CHILD).is_some() {
            let status =
                std::fs::read_to_string("/proc/self/status").expect("this process's status");
            let size: usize = status
                .lines()
                .find_map(|line| line.strip_prefix("FDSize:"))
                .and_then(|size| size.trim().parse().ok())
                .expect("the FDSize line");
            assert!(size >= 256, "a table of {size} descriptors");
            return;
        }
        // A process's table starts as large as its parent's highest open
        // descriptor needs: the fresh process is started by a shell that
        // holds only the standard three, so that its table starts small.
        let mut command = std::process::Command::new("sh");
        command
            .args([
                "-c",
                "\"$0\" --exact \"$1\" --test-threads=1; exit $?",
                &std::env::current_exe()
                    .expect("this test")
                    .to_string_lossy(),
                "pack::descriptors::tests::f11_the_descriptor_table_is_grown_before_main",
            ])
            .env(CHILD, "1");
        // SAFETY: between fork and exec only `close` runs, which is
        // async-signal-safe; every descriptor past the standard three is
        // the parent's, and the shell needs none of them.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                for descriptor in 3..1024 {
                    libc::close(descriptor);
                }
                Ok(())
            });
        }
        let output = command.output().expect("a fresh process of this test");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("1 passed"),
            "the fresh process ran the check"
        );
    }
}
