//! Where the store lives and how big it may grow: a plain struct with
//! defaults, each overridable by a `KILN_CACHE_*` variable.
//!
//! | variable | field | default |
//! |---|---|---|
//! | `KILN_CACHE_DIR` | [`StoreConfig::root`] | `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln` |
//! | `KILN_CACHE_DISABLE=1` | no store at all | enabled |
//! | `KILN_CACHE_MAX_SIZE` | [`StoreConfig::max_bytes`] | 10 GiB; `512M`, `10G`, `1.5GiB` |
//! | `KILN_CACHE_MAX_ENTRIES` | [`StoreConfig::max_entries`] | 1,000,000 |
//! | `KILN_CACHE_LOCK_TIMEOUT` | [`StoreConfig::lock_timeout`] | 60 seconds, at most a day |
//! | `KILN_CACHE_LEASE` | [`StoreConfig::lease`] | 10 seconds, at most a day |
//! | `KILN_CACHE_READ_ONLY=1` | [`StoreConfig::read_only`] | writable |
//! | `KILN_CACHE_PACK_BELOW` | [`StoreConfig::pack_below`] | 64 KiB; `0` keeps every entry a file |

use std::path::PathBuf;
use std::time::Duration;

use kiln_engine::ConfigError;

use crate::error::{Error, Result};

/// How a [`DiskStore`](crate::DiskStore) is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The folder the store keeps everything in. `KILN_CACHE_DIR`.
    pub root: PathBuf,
    /// The most bytes of artifacts and records it keeps before evicting the
    /// least recently used, counted as the file system allocates them
    /// (whole blocks), not as their lengths. `KILN_CACHE_MAX_SIZE`.
    pub max_bytes: u64,
    /// The most artifacts it keeps before evicting. `KILN_CACHE_MAX_ENTRIES`.
    pub max_entries: u64,
    /// How long a process waits for another compiling the same key before
    /// compiling it too. `KILN_CACHE_LOCK_TIMEOUT`, in seconds.
    pub lock_timeout: Duration,
    /// How long a claim outlives its holder's last renewal (P12): a holder
    /// renews every third of it while it lives, so one that hangs (stopped,
    /// stuck) loses its keys this long after, and a waiter compiles them.
    /// `KILN_CACHE_LEASE`, in seconds.
    pub lease: Duration,
    /// Whether publishing syncs files and folders to the disk (P3). Only
    /// scratch stores (benchmarks, throw-away tests) turn it off: without
    /// it, a power cut may leave a published entry empty, which then reads
    /// as corrupt.
    pub durable: bool,
    /// Whether the store keeps itself within its limits: a put that takes
    /// it over a limit starts evicting, on a thread of its own, down to
    /// 90 % of the limits, and the end of a batch that left it over evicts
    /// before the batch returns (P6).
    pub collects_automatically: bool,
    /// Whether the store is only read: hits are served, nothing is written
    /// (a put is skipped and counted, a claim is never taken). A store
    /// whose folder cannot be written is opened this way by itself.
    /// `KILN_CACHE_READ_ONLY=1`.
    pub read_only: bool,
    /// Artifacts smaller than this many bytes are appended, with their
    /// records and their kernel's history, to the store's packs (one file
    /// per shard) instead of files of their own: a store of many small
    /// kernels then holds about a thousand files, not four per kernel.
    /// 0 keeps every entry a file. Packed entries are read, verified,
    /// evicted and exported as files are, whatever this is set to.
    /// `KILN_CACHE_PACK_BELOW`.
    pub pack_below: u64,
}

/// 10 GiB, the default [`StoreConfig::max_bytes`].
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;
/// The default [`StoreConfig::max_entries`].
pub const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
/// 64 KiB, the default [`StoreConfig::pack_below`]. Most kernels' artifacts
/// (PTX, small cubins and code objects, SPIR-V of a few pipelines) are a few
/// KiB to a few tens of KiB: as files, each costs three to four inodes and
/// rounds up to whole blocks, so a store of them weighs several times what it
/// holds. Above 64 KiB a file wastes under a block in sixteen, one entry is
/// still read whole in one `pread`, and the large artifacts (GEMM cubins,
/// fat binaries) that eviction frees the most space from stay files that
/// are removed by one `unlink`, not by rewriting a pack.
pub const DEFAULT_PACK_BELOW: u64 = 64 << 10;
/// The largest [`StoreConfig::pack_below`]: a pack is for small entries,
/// and one entry is read whole.
pub const MAX_PACKED: u64 = 16 << 20;
/// The default [`StoreConfig::lock_timeout`].
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest [`StoreConfig::lock_timeout`] the environment may set: one
/// day. A longer wait is a hung build, not a patient one.
pub const MAX_LOCK_TIMEOUT: Duration = Duration::from_secs(86_400);

impl StoreConfig {
    /// The defaults, rooted at `root`.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            lease: kiln_engine::store::DEFAULT_LEASE,
            durable: true,
            collects_automatically: true,
            read_only: false,
            pack_below: DEFAULT_PACK_BELOW,
        }
    }

    /// The defaults at `root`, except that the store evicts only when
    /// asked ([`DiskStore::collect`](crate::DiskStore::collect), `kiln
    /// gc`), never by itself after a put or a batch: for a store whose
    /// entries a test counts or a tool walks, which an eviction of its own
    /// would change under it.
    pub fn evicting_only_when_asked(root: impl Into<PathBuf>) -> Self {
        Self {
            collects_automatically: false,
            ..Self::at(root)
        }
    }

    /// The settings from the environment, or `None` when
    /// `KILN_CACHE_DISABLE=1`.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read, or no folder to keep the
    /// store in.
    pub fn from_env() -> Result<Option<Self>> {
        Self::with_overrides(|name| std::env::var(name).ok())
    }

    /// The settings `lookup` gives, by variable name (`KILN_CACHE_*`,
    /// `XDG_CACHE_HOME`, `HOME`), or `None` when the store is disabled.
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn with_overrides(lookup: impl Fn(&'static str) -> Option<String>) -> Result<Option<Self>> {
        if let Some(value) = lookup("KILN_CACHE_DISABLE") {
            match value.trim() {
                "1" | "true" | "yes" => return Ok(None),
                "" | "0" | "false" | "no" => {}
                _ => {
                    return Err(ConfigError {
                        variable: "KILN_CACHE_DISABLE",
                        value,
                        expected: "1 to disable the store, 0 to keep it",
                    }
                    .into());
                }
            }
        }
        let root = default_root(&lookup).ok_or(Error::NoCacheFolder)?;
        let mut config = Self::at(root);
        if let Some(value) = lookup("KILN_CACHE_MAX_SIZE") {
            config.max_bytes = parse_size(&value).ok_or(ConfigError {
                variable: "KILN_CACHE_MAX_SIZE",
                value,
                expected: "a size in bytes, with an optional suffix: 512M, 10G, 1.5GiB",
            })?;
        }
        if let Some(value) = lookup("KILN_CACHE_MAX_ENTRIES") {
            config.max_entries = value.trim().parse().map_err(|_| ConfigError {
                variable: "KILN_CACHE_MAX_ENTRIES",
                value,
                expected: "a whole number of entries",
            })?;
        }
        if let Some(value) = lookup("KILN_CACHE_LOCK_TIMEOUT") {
            config.lock_timeout = parse_seconds(&value, MAX_LOCK_TIMEOUT).ok_or(ConfigError {
                variable: "KILN_CACHE_LOCK_TIMEOUT",
                value,
                expected: "a number of seconds from 0 to 86400 (one day)",
            })?;
        }
        if let Some(value) = lookup("KILN_CACHE_LEASE") {
            config.lease = parse_seconds(&value, MAX_LOCK_TIMEOUT)
                .filter(|lease| !lease.is_zero())
                .ok_or(ConfigError {
                    variable: "KILN_CACHE_LEASE",
                    value,
                    expected: "a number of seconds above 0, at most 86400 (one day)",
                })?;
        }
        if let Some(value) = lookup("KILN_CACHE_PACK_BELOW") {
            config.pack_below = parse_size(&value)
                .filter(|below| *below <= MAX_PACKED)
                .ok_or(ConfigError {
                    variable: "KILN_CACHE_PACK_BELOW",
                    value,
                    expected: "a size in bytes of at most 16M, with an optional suffix: 64K; 0 packs nothing",
                })?;
        }
        if let Some(value) = lookup("KILN_CACHE_READ_ONLY") {
            config.read_only = match value.trim() {
                "1" | "true" | "yes" => true,
                "" | "0" | "false" | "no" => false,
                _ => {
                    return Err(ConfigError {
                        variable: "KILN_CACHE_READ_ONLY",
                        value,
                        expected: "1 to only read the store, 0 to write it too",
                    }
                    .into());
                }
            };
        }
        Ok(Some(config))
    }
}

/// The folder the store lives in when `KILN_CACHE_DIR` does not say:
/// `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`.
fn default_root(lookup: &impl Fn(&'static str) -> Option<String>) -> Option<PathBuf> {
    let non_empty = |name| lookup(name).filter(|value: &String| !value.trim().is_empty());
    if let Some(dir) = non_empty("KILN_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(cache) = non_empty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(cache).join("kiln"));
    }
    non_empty("HOME").map(|home| PathBuf::from(home).join(".cache").join("kiln"))
}

/// A duration from a number of seconds (`60`, `0.5`, `1e3`) of at most
/// `most`, or `None` for anything else: no text of the environment may make
/// a duration that `Duration` or a deadline cannot hold.
fn parse_seconds(text: &str, most: Duration) -> Option<Duration> {
    let seconds: f64 = text.trim().parse().ok()?;
    (seconds.is_finite() && (0.0..=most.as_secs_f64()).contains(&seconds))
        .then(|| Duration::from_secs_f64(seconds))
}

/// A size in bytes from text like `1048576`, `512M`, `10G`, `1.5GiB` or
/// `64 KB`. Suffixes are binary (K = 1024), as in `CUDA_CACHE_MAXSIZE`'s
/// neighbours; case and a trailing `B`/`iB` do not matter.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let suffix = suffix.trim().to_ascii_lowercase();
    let suffix = suffix
        .strip_suffix("ib")
        .or_else(|| suffix.strip_suffix('b'))
        .unwrap_or(&suffix);
    let shift = match suffix {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    let bytes = number * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("10G"), Some(10 << 30));
        assert_eq!(parse_size("10 GiB"), Some(10 << 30));
        assert_eq!(parse_size("1.5g"), Some(3 << 29));
        assert_eq!(parse_size("64kb"), Some(64 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("ten"), None);
        assert_eq!(parse_size("5X"), None);
    }

    // F10: small entries are packed unless the environment says otherwise.
    #[test]
    fn f10_small_entries_are_packed_by_default_and_0_packs_nothing() {
        let dir = |name| (name == "KILN_CACHE_DIR").then(|| "/store".to_owned());
        let default = StoreConfig::with_overrides(dir).unwrap().unwrap();
        assert_eq!(default.pack_below, 64 << 10);
        assert_eq!(StoreConfig::at("/store").pack_below, DEFAULT_PACK_BELOW);
        let off = StoreConfig::with_overrides(|name| match name {
            "KILN_CACHE_DIR" => Some("/store".to_owned()),
            "KILN_CACHE_PACK_BELOW" => Some("0".to_owned()),
            _ => None,
        })
        .unwrap()
        .unwrap();
        assert_eq!(off.pack_below, 0);
    }

    #[test]
    fn the_folder_comes_from_kiln_then_xdg_then_home() {
        let config = |vars: &'static [(&'static str, &'static str)]| {
            StoreConfig::with_overrides(|name| {
                vars.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            })
        };
        let root = |vars| config(vars).expect("valid").expect("enabled").root;
        assert_eq!(
            root(&[
                ("KILN_CACHE_DIR", "/a"),
                ("XDG_CACHE_HOME", "/b"),
                ("HOME", "/c")
            ]),
            PathBuf::from("/a")
        );
        assert_eq!(
            root(&[("XDG_CACHE_HOME", "/b"), ("HOME", "/c")]),
            PathBuf::from("/b/kiln")
        );
        assert_eq!(root(&[("HOME", "/c")]), PathBuf::from("/c/.cache/kiln"));
        assert!(matches!(config(&[]), Err(Error::NoCacheFolder)));
        assert!(
            config(&[("KILN_CACHE_DISABLE", "1"), ("HOME", "/c")])
                .expect("valid")
                .is_none()
        );
    }

    fn with(variable: &'static str, value: &'static str) -> Result<Option<StoreConfig>> {
        StoreConfig::with_overrides(move |name| match name {
            "HOME" => Some("/c".into()),
            name if name == variable => Some(value.into()),
            _ => None,
        })
    }

    #[test]
    fn a_lock_timeout_out_of_range_is_refused_naming_the_variable_and_the_range() {
        for value in ["1e20", "9.3e18", "86401", "-1", "inf", "NaN", "soon"] {
            let error = with("KILN_CACHE_LOCK_TIMEOUT", value).expect_err(value);
            let message = error.to_string();
            assert!(
                message.contains("KILN_CACHE_LOCK_TIMEOUT") && message.contains("0 to 86400"),
                "{message}"
            );
        }
        let timeout = |value| {
            with("KILN_CACHE_LOCK_TIMEOUT", value)
                .expect("in range")
                .expect("enabled")
                .lock_timeout
        };
        assert_eq!(timeout("86400"), MAX_LOCK_TIMEOUT);
        assert_eq!(timeout("0.5"), Duration::from_millis(500));
        assert_eq!(timeout("0"), Duration::ZERO);
    }

    #[test]
    fn kiln_cache_read_only_asks_for_a_read_only_store() {
        let read_only = |value| {
            with("KILN_CACHE_READ_ONLY", value)
                .expect("valid")
                .expect("enabled")
                .read_only
        };
        assert!(read_only("1"));
        assert!(!read_only("0"));
        assert!(!StoreConfig::at("/c").read_only);
        let error = with("KILN_CACHE_READ_ONLY", "maybe").expect_err("not a switch");
        assert!(
            error.to_string().contains("KILN_CACHE_READ_ONLY"),
            "{error}"
        );
    }

    #[test]
    fn a_bad_size_is_named_in_the_error() {
        let error = StoreConfig::with_overrides(|name| match name {
            "HOME" => Some("/c".into()),
            "KILN_CACHE_MAX_SIZE" => Some("lots".into()),
            _ => None,
        })
        .expect_err("lots is not a size");
        assert!(error.to_string().contains("KILN_CACHE_MAX_SIZE"), "{error}");
    }
}
