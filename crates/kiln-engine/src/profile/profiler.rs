//! A loader's profile of one run: the last profile read and its kernels
//! looked up in the store on a thread of its own while the program starts
//! (store hits, decoded and ready for the device), the kernels this run
//! loaded, and the one write of the next profile.
//!
//! Only hits are prefetched: a profile holds artifact ids, and compiling a
//! missing kernel needs the program's kernel object, so a profiled kernel
//! the store lost compiles when the program queues or launches it, as any
//! kernel does.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::{StoredProfile, profile_blob_key};
use crate::compiler::ArtifactCompiler;
use crate::id::ArtifactId;
use crate::store::{ArtifactStore, BlobKey, BoundStore, KeyComponents, KeyedCompiler, Lookup};

/// The longest a loader waits for its profile's lookups: past it, it goes
/// on without them (a store that hangs never holds a program up).
const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// What the profile's thread sends, in order: the last profile, each of
/// its kernels the store holds as soon as it is read and decoded, then the
/// end.
enum Prefetch<C: ArtifactCompiler> {
    /// The last profile, if there was one.
    Previous(Option<StoredProfile>),
    /// A profiled kernel the store held, with its artifact and the bytes
    /// read.
    Found(ArtifactId<C::Variant>, C::Artifact, u64),
    /// Every kernel of the profile was asked for.
    Done,
}

/// A loader's profile of the running process.
pub(crate) struct Profiler<C: ArtifactCompiler> {
    program: String,
    components: KeyComponents,
    store: Arc<dyn ArtifactStore>,
    name: BlobKey,
    prefetch: Option<Receiver<Prefetch<C>>>,
    /// Set when the profile is given up: a thread that has not read the
    /// store yet reads nothing.
    given_up: Arc<AtomicBool>,
    previous: Option<StoredProfile>,
    /// The kernels this run's batches loaded, in order, repeats and all:
    /// noting one is a push, the encoding waits for [`save`](Self::save).
    used: Vec<ArtifactId<C::Variant>>,
    /// The profiled kernels loaded ahead, by the index the loaded map's
    /// slot holds.
    watched: Vec<ArtifactId<C::Variant>>,
    /// Whether the program asked for each of `watched` yet: apart from the
    /// ids, so that a first launch writes one byte of a small array.
    asked: Vec<bool>,
    saved: bool,
}

impl<C: KeyedCompiler + 'static> Profiler<C> {
    /// Starts reading `program`'s last profile from `store` and looking its
    /// kernels up, on a thread of its own.
    pub(crate) fn start(program: &str, store: Arc<dyn ArtifactStore>, compiler: Arc<C>) -> Self {
        let components = compiler.key_components();
        let name = profile_blob_key(program, &components);
        let (sender, receiver) = mpsc::channel();
        let (read_store, read_name) = (Arc::clone(&store), name.clone());
        let given_up = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&given_up);
        let started = std::thread::Builder::new()
            .name("kiln-profile".into())
            .spawn(move || {
                prefetch(&read_store, &read_name, &*compiler, &stop, &sender);
                // The loader stopped listening only when it went away.
                drop(sender.send(Prefetch::Done));
            });
        if let Err(error) = &started {
            log::warn!("could not start reading the warm-start profile: {error}");
        }
        Self {
            program: program.to_owned(),
            components,
            store,
            name,
            prefetch: started.is_ok().then_some(receiver),
            given_up,
            previous: None,
            used: Vec::new(),
            watched: Vec::new(),
            asked: Vec::new(),
            saved: false,
        }
    }
}

impl<C: ArtifactCompiler> Profiler<C> {
    /// Whether the profile's lookups are still to be taken.
    pub(crate) fn is_pending(&self) -> bool {
        self.prefetch.is_some()
    }

    /// Hands each profiled kernel the store held to `found`, once, as the
    /// profile's thread reads it: waits for that thread, up to a bound.
    pub(crate) fn take_each(
        &mut self,
        mut found: impl FnMut(ArtifactId<C::Variant>, C::Artifact, u64),
    ) {
        let Some(receiver) = self.prefetch.take() else {
            return;
        };
        let deadline = Instant::now() + LONGEST_WAIT;
        loop {
            match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Prefetch::Previous(previous)) => self.previous = previous,
                Ok(Prefetch::Found(id, artifact, bytes)) => found(id, artifact, bytes),
                Ok(Prefetch::Done) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    log::warn!(
                        "the warm-start profile's lookups took over {LONGEST_WAIT:?}: going on \
                         without the rest"
                    );
                    return;
                }
            }
        }
    }

    /// The profile the last run left, once [`take_each`](Self::take_each)
    /// read it.
    pub(crate) fn previous(&self) -> Option<&StoredProfile> {
        self.previous.as_ref()
    }

    /// `id` was loaded this run.
    pub(crate) fn note(&mut self, id: &ArtifactId<C::Variant>) {
        self.used.push(id.clone());
    }

    /// `id`, a profiled kernel loaded ahead, is watched: the index its
    /// first ask is reported under ([`asked`](Self::asked)).
    pub(crate) fn watch(&mut self, id: ArtifactId<C::Variant>) -> u32 {
        let index = u32::try_from(self.watched.len()).unwrap_or(u32::MAX);
        self.watched.push(id);
        self.asked.push(false);
        index
    }

    /// The program asked for the kernel watched as `index`.
    #[inline]
    pub(crate) fn asked(&mut self, index: u32) {
        if let Some(asked) = self.asked.get_mut(index as usize) {
            *asked = true;
        }
    }

    /// `id` is no kernel this run asked for after all.
    pub(crate) fn unnote(&mut self, id: &ArtifactId<C::Variant>) {
        self.used.retain(|used| used != id);
        for (watched, asked) in self.watched.iter().zip(&mut self.asked) {
            if watched == id {
                *asked = false;
            }
        }
    }

    /// Gives the profile up: nothing is written, now or at the drop.
    pub(crate) fn discard(&mut self) {
        self.saved = true;
        self.given_up.store(true, Ordering::Relaxed);
        self.prefetch = None;
    }

    /// Writes the next profile, once a run; later calls do nothing.
    pub(crate) fn save(&mut self) {
        if std::mem::replace(&mut self.saved, true) {
            return;
        }
        // A loader dropped before it took its profile still ages it.
        if self.prefetch.is_some() {
            self.take_each(|_, _, _| {});
        }
        let mut used = HashMap::new();
        let asked = std::mem::take(&mut self.watched)
            .into_iter()
            .zip(std::mem::take(&mut self.asked))
            .filter_map(|(id, asked)| asked.then_some(id));
        for id in self.used.drain(..).chain(asked) {
            match crate::encoding::encode(&id) {
                Ok(encoded) => {
                    used.entry(encoded).or_insert_with(|| format!("{id:?}"));
                }
                Err(error) => {
                    log::debug!("a kernel id that does not encode is not profiled: {error}")
                }
            }
        }
        let mut next = StoredProfile::next(
            &self.program,
            &self.components,
            self.previous.as_ref(),
            used,
        );
        // Another loader of the program and compiler (another device of
        // the same model, another process) may have written the profile
        // since this one read it: joined, so neither loses the other's
        // kernels. Two writes at the same instant may still lose one.
        if let Some(latest) = self.latest()
            && Some(&latest) != self.previous.as_ref()
        {
            next = next.joined(&latest);
        }
        if next.kernels.is_empty() && self.previous.is_none() {
            return;
        }
        if let crate::store::StoreOutcome::Failed { detail } =
            self.store.parts().put_blob(&self.name, &next.to_bytes())
        {
            log::warn!(
                "could not keep the warm-start profile of {}: {detail}",
                self.program
            );
        }
    }
}

impl<C: ArtifactCompiler> Profiler<C> {
    /// The profile the store holds now.
    fn latest(&self) -> Option<StoredProfile> {
        match self.store.parts().lookup_blob(&self.name) {
            Lookup::Hit { artifact, .. } => StoredProfile::from_bytes(&artifact),
            Lookup::Miss(_) => None,
        }
    }
}

impl<C: ArtifactCompiler> Drop for Profiler<C> {
    fn drop(&mut self) {
        self.save();
    }
}

/// Reads the profile `name`, looks each of its kernels up at once, and
/// sends what it finds to `sender` as it is read.
fn prefetch<C: KeyedCompiler>(
    store: &Arc<dyn ArtifactStore>,
    name: &BlobKey,
    compiler: &C,
    given_up: &AtomicBool,
    sender: &Sender<Prefetch<C>>,
) {
    if given_up.load(Ordering::Relaxed) {
        return;
    }
    let previous = match store.parts().lookup_blob(name) {
        Lookup::Hit { artifact, .. } => StoredProfile::from_bytes(&artifact),
        Lookup::Miss(_) => None,
    };
    let ids: Vec<ArtifactId<C::Variant>> = previous
        .iter()
        .flat_map(|profile| &profile.kernels)
        .filter_map(|kernel| {
            crate::encoding::decode::<ArtifactId<C::Variant>>(&kernel.id)
                .ok()
                .map(|(id, _)| id)
        })
        .collect();
    // The loader stopped listening only when it went away.
    drop(sender.send(Prefetch::Previous(previous)));
    if ids.is_empty() || given_up.load(Ordering::Relaxed) {
        return;
    }
    let bound = BoundStore::new(Arc::clone(store), compiler);
    let asked: Vec<&ArtifactId<C::Variant>> = ids.iter().collect();
    bound.lookup_each(compiler, &asked, &mut |at, lookup| {
        if let Lookup::Hit {
            artifact, bytes, ..
        } = lookup
        {
            drop(sender.send(Prefetch::Found(ids[at].clone(), artifact, bytes)));
        }
    });
}
