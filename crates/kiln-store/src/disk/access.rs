//! Access times, set explicitly (P6): the object's access time is an
//! entry's place in the eviction order, on `noatime` mounts too.

use std::fs::{File, FileTimes, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An access time this recent is not written again: a hit then costs no
/// write, and least-recently-used order at this grain is all eviction needs.
const ACCESS_GRAIN: Duration = Duration::from_secs(60);

/// Records the access explicitly, as `noatime` mounts would not (P6), at
/// most once per [`ACCESS_GRAIN`].
pub(crate) fn touch(file: &File, found: &Metadata) {
    let now = SystemTime::now();
    let recent = found
        .accessed()
        .ok()
        .and_then(|accessed| now.duration_since(accessed).ok())
        .is_some_and(|age| age < ACCESS_GRAIN);
    if !recent && let Err(error) = file.set_times(FileTimes::new().set_accessed(now)) {
        log::trace!("cannot record an access: {error}");
    }
}

/// Records an access through an inline record (P6), at most once per
/// [`ACCESS_GRAIN`].
///
/// The object's access time stays the entry's one clock for eviction, so a
/// hit through the record sets it, by path. The record's modification time
/// says when a hit through it last did: a record's bytes never change, so
/// that time has nothing else to say, and the record's own access time
/// would not do, as the system may set it on every read. A record is
/// published with the oldest modification time ([`not_yet_refreshed`]), so
/// the first hit after a put always sets the clock.
pub(super) fn touch_inline(record: &File, found: &Metadata, object: impl FnOnce() -> PathBuf) {
    let now = SystemTime::now();
    let recent = found
        .modified()
        .ok()
        .and_then(|refreshed| now.duration_since(refreshed).ok())
        .is_some_and(|age| age < ACCESS_GRAIN);
    if recent {
        return;
    }
    if let Err(error) = set_accessed(&object(), now) {
        log::trace!("cannot record an access: {error}");
    }
    if let Err(error) = record.set_times(FileTimes::new().set_accessed(now).set_modified(now)) {
        log::trace!("cannot record an access: {error}");
    }
}

/// Marks a freshly published inline record as never having set its
/// object's access time (see [`touch_inline`]).
pub(crate) fn not_yet_refreshed(record: &File) {
    if let Err(error) = record.set_times(FileTimes::new().set_modified(SystemTime::UNIX_EPOCH)) {
        log::trace!("cannot reset a record's time: {error}");
    }
}

/// Sets the access time of the file at `path` to `when`, in one call.
fn set_accessed(path: &Path, when: SystemTime) -> io::Result<()> {
    let since = when
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(io::Error::other)?;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `timespec` is plain data (on some systems with padding
    // fields, hence no literal); all-zero is a valid value.
    let mut times: [libc::timespec; 2] = unsafe { std::mem::zeroed() };
    times[0].tv_sec = libc::time_t::try_from(since.as_secs()).map_err(io::Error::other)?;
    // Below 10^9: fits a `c_long` of any width.
    times[0].tv_nsec = since.subsec_nanos() as libc::c_long;
    // The modification time stays as it is.
    times[1].tv_nsec = libc::UTIME_OMIT;
    // A link at the object's name is left as it is, and its target too.
    let flags = libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: `path` is a NUL-terminated string and `times` two valid
    // `timespec`s, both alive for the call.
    if unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File, FileTimes};
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use kiln_engine::ArtifactStoreExt;

    use crate::fixtures::{accessed, hit, kernel_key, scratch};

    #[test]
    fn p6_a_hit_through_a_record_that_carries_the_bytes_moves_its_object_up_once_a_minute() {
        // P6: the object's access time is the entry's clock, whichever
        // file a hit reads.
        let store = scratch("inline-touch");
        store.put(&kernel_key(1), None, b"small artifact", Duration::ZERO);
        let object = store.object_path(&store.record(&kernel_key(1)).expect("stored").object);
        let long_ago = SystemTime::now() - Duration::from_secs(86_400);
        let age = |path: &Path| {
            File::open(path)
                .and_then(|file| file.set_times(FileTimes::new().set_accessed(long_ago)))
                .expect("an access time");
        };
        age(&object);
        hit(&store, &kernel_key(1));
        assert!(accessed(&object) > long_ago, "the first hit after a put");
        age(&object);
        hit(&store, &kernel_key(1));
        assert_eq!(
            accessed(&object),
            long_ago,
            "a second hit within a minute writes nothing"
        );
        let _ = fs::remove_dir_all(store.root());
    }

    // P6, F11: a packed entry's read renews its access time, written off
    // the reader's path and on disk once the store that read it is gone.
    #[test]
    fn p6_a_packed_hit_renews_its_access_time_by_the_stores_end() {
        use std::os::unix::fs::FileExt;

        use kiln_engine::ArtifactStore;

        use crate::{DiskStore, StoreConfig};
        let root =
            std::env::temp_dir().join(format!("kiln-store-packed-touch-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let config = StoreConfig {
            collects_automatically: false,
            ..StoreConfig::at(root.clone())
        };
        let store = DiskStore::open(config.clone()).expect("a store");
        store.put(
            &kernel_key(1),
            None,
            b"small packed artifact",
            Duration::ZERO,
        );
        drop(store);
        // Every slot read long ago (its time outside the slot's check).
        let mut indexes = 0;
        for entry in fs::read_dir(root.join("packs")).expect("the packs") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|extension| extension == "idx") {
                indexes += 1;
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("an index");
                let length = file.metadata().expect("its size").len();
                for slot in (32..length / 32 * 32).step_by(32) {
                    file.write_all_at(&[0; 4], slot + 28).expect("an aged slot");
                }
            }
        }
        assert!(indexes > 0, "the entry was packed");
        let oldest = |config: &StoreConfig| {
            let mut times = Vec::new();
            DiskStore::open(config.clone())
                .expect("the store")
                .entries(&mut |info| times.push(info.accessed_at))
                .expect("its entries");
            times.into_iter().flatten().min()
        };
        assert_eq!(oldest(&config), Some(0), "aged");
        let store = DiskStore::open(config.clone()).expect("the store again");
        assert!(matches!(
            store.lookup(&kernel_key(1)),
            kiln_engine::Lookup::Hit { .. }
        ));
        drop(store);
        let now = crate::record::now_seconds();
        let renewed = oldest(&config).expect("an access time");
        assert!(
            now.saturating_sub(renewed) < 60,
            "renewed at {renewed}, now {now}"
        );
        let _ = fs::remove_dir_all(root);
    }
}
