//! Warm-start profiles (L12): which kernels a program loaded on a device
//! last time, so its next process loads them from the store before it
//! asks.
//!
//! A profile is a named blob of kind [`PROFILE_BLOB_KIND`], named after the
//! program and the compiler's key components (backend, compiler and
//! version, architecture, options): what a device is, as far as the store's
//! keys can tell. Being a blob, it is kept as artifacts are — sealed and
//! verified, published by rename and never through a link, evicted as any
//! entry — by every store with no code of its own.
//!
//! A profile is bounded ([`PROFILE_LIMIT`] kernels) and written once a run,
//! when its loader is dropped or [`save_profile`] is called: the kernels the
//! run loaded are young again, every other kernel of the last profile grows
//! one run older, and a kernel not asked for in [`PROFILE_MAX_AGE`] runs
//! ages out. The `profiler` module reads the last profile on a thread of
//! its own and looks its kernels up in the store while the program starts.
//!
//! [`save_profile`]: crate::KernelLoader::save_profile

mod profiler;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::store::{BlobKey, KeyComponents};

pub(crate) use profiler::Profiler;

/// The kind of the blobs profiles are kept under, as `kiln ls` and `kiln
/// profiles` name it.
pub const PROFILE_BLOB_KIND: &str = "warm-start profile";

/// The most kernels a profile holds: past it, the longest unused go first.
pub const PROFILE_LIMIT: usize = 4096;

/// How many runs in a row a kernel may go unasked before it leaves the
/// profile.
pub const PROFILE_MAX_AGE: u32 = 8;

/// The version of [`StoredProfile`]'s encoding: a profile of another is
/// none.
const PROFILE_FORMAT: u32 = 1;

/// Which program a profile belongs to: the name its processes share.
///
/// ```
/// use kiln_engine::profile::Program;
///
/// assert_eq!(Program::named("inference-server").name(), "inference-server");
/// assert!(!Program::executable().name().is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program(String);

impl Program {
    /// The program called `name`.
    pub fn named(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The program by its executable's file name: every process of one
    /// binary shares its profile.
    pub fn executable() -> Self {
        let name = std::env::current_exe()
            .ok()
            .and_then(|path| {
                path.file_name()
                    .map(|name| name.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "unnamed program".to_owned());
        Self(name)
    }

    /// The same program's profile on `device`, one of several devices of
    /// one model in a process: each device keeps its own (L12). Device 0
    /// keeps the program's own profile, so a one-device program's is the
    /// same with or without it; device N's is named `NAME on BACKEND:N`.
    ///
    /// ```
    /// use kiln_engine::DeviceId;
    /// use kiln_engine::profile::Program;
    ///
    /// let server = Program::named("server");
    /// assert_eq!(server.clone().on_device(DeviceId::new("cuda", 0)).name(), "server");
    /// assert_eq!(server.on_device(DeviceId::new("cuda", 1)).name(), "server on cuda:1");
    /// ```
    #[must_use]
    pub fn on_device(self, device: crate::id::DeviceId) -> Self {
        if device.number() == 0 {
            self
        } else {
            Self(format!("{} on {device}", self.0))
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// One kernel of a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfiledKernel {
    /// The kernel and variant as logs print them.
    pub kernel: String,
    /// Its artifact id, encoded: what the next process looks up.
    pub id: Vec<u8>,
    /// Runs since a run last asked for it: 0 when the last one did.
    pub age: u32,
}

impl ProfiledKernel {
    /// Its kernel id and its variant's bytes as a store key holds them
    /// ([`StoreKey::variant`](crate::store::StoreKey::variant)), when its
    /// id decodes: what `kiln coverage` looks a profiled kernel up by.
    pub fn key_parts(&self) -> Option<(crate::id::KernelId, &[u8])> {
        let (kernel, read) = crate::encoding::decode::<crate::id::KernelId>(&self.id).ok()?;
        Some((kernel, &self.id[read..]))
    }
}

/// A profile as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredProfile {
    format: u32,
    /// The program.
    pub program: String,
    /// The compiler's key components it holds for.
    pub components: KeyComponents,
    /// Its kernels, youngest first.
    pub kernels: Vec<ProfiledKernel>,
    /// How many runs wrote it.
    pub runs: u64,
    /// When it was last written, in seconds since the Unix epoch.
    pub updated_at: u64,
}

impl StoredProfile {
    /// The profile a run leaves after `previous`: `used` (encoded artifact
    /// ids with their text) young, the rest of `previous` a run older,
    /// the too old gone, at most [`PROFILE_LIMIT`] kernels.
    pub(crate) fn next(
        program: &str,
        components: &KeyComponents,
        previous: Option<&Self>,
        used: impl IntoIterator<Item = (Vec<u8>, String)>,
    ) -> Self {
        let mut kernels: Vec<ProfiledKernel> = used
            .into_iter()
            .map(|(id, kernel)| ProfiledKernel { kernel, id, age: 0 })
            .collect();
        let young: std::collections::HashSet<Vec<u8>> =
            kernels.iter().map(|kernel| kernel.id.clone()).collect();
        let older = previous
            .into_iter()
            .flat_map(|previous| &previous.kernels)
            .filter(|kernel| !young.contains(&kernel.id) && kernel.age < PROFILE_MAX_AGE)
            .map(|kernel| ProfiledKernel {
                age: kernel.age + 1,
                ..kernel.clone()
            });
        kernels.extend(older);
        kernels.sort_by_key(|kernel| kernel.age);
        kernels.truncate(PROFILE_LIMIT);
        Self {
            format: PROFILE_FORMAT,
            program: program.to_owned(),
            components: components.clone(),
            kernels,
            runs: previous.map_or(0, |previous| previous.runs) + 1,
            updated_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
        }
    }

    /// This profile, which this run's loader wrote, joined with `other`:
    /// one written by another loader of the same program and compiler since
    /// this one read its last profile (another device of the same model, or
    /// another process). Each kernel of either is kept at the younger of
    /// its two ages, so a kernel either run asked for stays young and no
    /// writer loses the other's; at most [`PROFILE_LIMIT`] kernels.
    pub(crate) fn joined(mut self, other: &Self) -> Self {
        let mut index: std::collections::HashMap<Vec<u8>, usize> = self
            .kernels
            .iter()
            .enumerate()
            .map(|(position, kernel)| (kernel.id.clone(), position))
            .collect();
        for kernel in &other.kernels {
            match index.get(&kernel.id) {
                Some(&position) => {
                    let mine = &mut self.kernels[position];
                    mine.age = mine.age.min(kernel.age);
                }
                None => {
                    index.insert(kernel.id.clone(), self.kernels.len());
                    self.kernels.push(kernel.clone());
                }
            }
        }
        self.kernels.sort_by_key(|kernel| kernel.age);
        self.kernels.truncate(PROFILE_LIMIT);
        self.runs = self.runs.max(other.runs);
        self
    }

    /// A profile of nothing for `program`: what forgetting writes.
    pub fn forgotten(program: &str, components: &KeyComponents) -> Self {
        Self {
            format: PROFILE_FORMAT,
            program: program.to_owned(),
            components: components.clone(),
            kernels: Vec::new(),
            runs: 0,
            updated_at: 0,
        }
    }

    /// The bytes it is stored as.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::encoding::encode(self).expect("a profile is plain data and serializes")
    }

    /// The profile stored as `bytes`; `None` when they are not one whole
    /// profile of this format: no profile.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match crate::encoding::decode::<Self>(bytes) {
            Ok((profile, read)) if read == bytes.len() && profile.format == PROFILE_FORMAT => {
                Some(profile)
            }
            _ => None,
        }
    }
}

/// The blob name of `program`'s profile for a compiler of `components`.
pub fn profile_blob_key(program: &str, components: &KeyComponents) -> BlobKey {
    BlobKey::new(PROFILE_BLOB_KIND)
        .component("program", program)
        .component("backend", &components.backend)
        .component("compiler", &components.compiler)
        .component("architecture", &components.architecture)
        .component("options", &components.options)
}

impl fmt::Display for StoredProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} {} ({} kernels)",
            self.program,
            self.components.backend,
            self.components.architecture,
            self.kernels.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components() -> KeyComponents {
        KeyComponents::new("fake", "kiln-fake 1", "fake_1", "")
    }

    fn used(numbers: &[u8]) -> Vec<(Vec<u8>, String)> {
        numbers
            .iter()
            .map(|number| (vec![*number], format!("kernel {number}")))
            .collect()
    }

    #[test]
    fn kernels_no_longer_asked_for_age_out() {
        // L12
        let mut profile = StoredProfile::next("p", &components(), None, used(&[1, 2]));
        assert_eq!(profile.kernels.len(), 2);
        for run in 1..=PROFILE_MAX_AGE {
            profile = StoredProfile::next("p", &components(), Some(&profile), used(&[1]));
            assert_eq!(profile.kernels.len(), 2, "kernel 2 stays {run} runs");
            assert_eq!(profile.kernels[1].age, run);
        }
        profile = StoredProfile::next("p", &components(), Some(&profile), used(&[1]));
        assert_eq!(profile.kernels.len(), 1, "and goes after that");
        assert_eq!(profile.kernels[0].id, vec![1]);
        assert_eq!(profile.runs, u64::from(PROFILE_MAX_AGE) + 2);
        assert_eq!(
            StoredProfile::from_bytes(&profile.to_bytes()),
            Some(profile)
        );
    }

    #[test]
    fn a_profile_is_bounded_keeping_the_youngest() {
        // L12
        let old: Vec<(Vec<u8>, String)> = (0..PROFILE_LIMIT as u32)
            .map(|number| (number.to_le_bytes().to_vec(), number.to_string()))
            .collect();
        let previous = StoredProfile::next("p", &components(), None, old);
        let profile = StoredProfile::next("p", &components(), Some(&previous), used(&[7]));
        assert_eq!(profile.kernels.len(), PROFILE_LIMIT);
        assert_eq!(
            (profile.kernels[0].id.clone(), profile.kernels[0].age),
            (vec![7], 0)
        );
    }

    #[test]
    fn l12_two_writers_of_one_profile_keep_both_their_kernels() {
        let previous = StoredProfile::next("p", &components(), None, used(&[1, 2]));
        let first = StoredProfile::next("p", &components(), Some(&previous), used(&[3]));
        let second = StoredProfile::next("p", &components(), Some(&previous), used(&[1, 4]));
        let joined = second.joined(&first);
        let ages: Vec<(Vec<u8>, u32)> = joined
            .kernels
            .iter()
            .map(|kernel| (kernel.id.clone(), kernel.age))
            .collect();
        assert_eq!(
            ages,
            vec![(vec![1], 0), (vec![4], 0), (vec![3], 0), (vec![2], 1)],
            "each writer's kernels young, the one neither asked for a run older"
        );
        assert_eq!(joined.runs, 2);
    }

    #[test]
    fn l12_device_zero_keeps_the_programs_profile_and_others_their_own() {
        use crate::id::DeviceId;
        let on = |number| {
            Program::named("p")
                .on_device(DeviceId::new("fake", number))
                .name()
                .to_owned()
        };
        assert_eq!(on(0), "p");
        assert_ne!(on(1), on(0));
        assert_ne!(on(1), on(2));
    }

    #[test]
    fn another_program_or_compiler_has_another_profile() {
        // L12
        let base = profile_blob_key("p", &components());
        assert_ne!(base.digest(), profile_blob_key("q", &components()).digest());
        let newer = KeyComponents::new("fake", "kiln-fake 2", "fake_1", "");
        assert_ne!(base.digest(), profile_blob_key("p", &newer).digest());
    }
}
