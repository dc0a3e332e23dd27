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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
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

/// Reads the last profile and looks its kernels up, handing each step to
/// the function it is given.
type Reading<C> = Box<dyn FnOnce(&mut dyn FnMut(Prefetch<C>)) + Send>;

/// The profile's reading until somebody takes it: shared by its thread and
/// the loader, and done by whichever takes it first.
type Unread<C> = Arc<Mutex<Option<Reading<C>>>>;

/// A loader's profile of the running process.
pub(crate) struct Profiler<C: ArtifactCompiler> {
    program: String,
    components: KeyComponents,
    store: Arc<dyn ArtifactStore>,
    name: BlobKey,
    prefetch: Option<Receiver<Prefetch<C>>>,
    /// The profile's reading, done once, by whichever takes it first: its
    /// thread, or the loader's first take (a thread that starts late, as a
    /// new thread may on a virtual machine, then holds nothing up).
    unread: Unread<C>,
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
        Self::begin(program, store, compiler, None)
    }

    /// [`start`](Self::start), its thread held back until `hold` says go
    /// (or is dropped).
    fn begin(
        program: &str,
        store: Arc<dyn ArtifactStore>,
        compiler: Arc<C>,
        hold: Option<Receiver<()>>,
    ) -> Self {
        let components = compiler.key_components();
        let name = profile_blob_key(program, &components);
        let (sender, receiver) = mpsc::channel();
        let given_up = Arc::new(AtomicBool::new(false));
        let unread: Unread<C> = {
            let (store, name, stop) = (Arc::clone(&store), name.clone(), Arc::clone(&given_up));
            Arc::new(Mutex::new(Some(Box::new(
                move |emit: &mut dyn FnMut(Prefetch<C>)| {
                    prefetch(&store, &name, &*compiler, &stop, emit);
                },
            ))))
        };
        let thread_unread = Arc::clone(&unread);
        let started = std::thread::Builder::new()
            .name("kiln-profile".into())
            .spawn(move || {
                if let Some(hold) = hold {
                    let _ = hold.recv();
                }
                if let Some(reading) = take(&thread_unread) {
                    // The loader stopped listening only when it went away.
                    reading(&mut |step| drop(sender.send(step)));
                }
                drop(sender.send(Prefetch::Done));
            });
        if let Err(error) = &started {
            log::debug!(
                "no thread to read the warm-start profile ahead ({error}): the loader's first use \
                 reads it"
            );
        }
        Self {
            program: program.to_owned(),
            components,
            store,
            name,
            prefetch: Some(receiver),
            // Without a thread, the loader's first take reads the profile.
            unread,
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
        if let Some(reading) = self.take_reading() {
            // The profile's thread has not begun: the profile is read here,
            // each kernel handed over as soon as it is read.
            let previous = &mut self.previous;
            reading(&mut |step| match step {
                Prefetch::Previous(read) => *previous = read,
                Prefetch::Found(id, artifact, bytes) => found(id, artifact, bytes),
                Prefetch::Done => {}
            });
            return;
        }
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

    /// The profile's reading, for this thread to do, when its thread has
    /// not begun it (and now never will).
    fn take_reading(&mut self) -> Option<Reading<C>> {
        take(&self.unread)
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
        drop(self.take_reading());
    }

    /// Writes the next profile, once a run; later calls do nothing.
    pub(crate) fn save(&mut self) {
        if std::mem::replace(&mut self.saved, true) {
            return;
        }
        // A loader dropped before it took its profile still ages it: the
        // profile is read here when its thread has not begun, its kernels
        // not looked up.
        if self.prefetch.is_some() {
            if self.take_reading().is_some() {
                self.prefetch = None;
                self.previous = self.latest();
            } else {
                self.take_each(|_, _, _| {});
            }
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
/// The profile's reading, for the caller to do, unless somebody took it.
fn take<C: ArtifactCompiler>(unread: &Unread<C>) -> Option<Reading<C>> {
    unread.lock().unwrap_or_else(PoisonError::into_inner).take()
}

fn prefetch<C: KeyedCompiler>(
    store: &Arc<dyn ArtifactStore>,
    name: &BlobKey,
    compiler: &C,
    given_up: &AtomicBool,
    emit: &mut dyn FnMut(Prefetch<C>),
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
    emit(Prefetch::Previous(previous));
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
            emit(Prefetch::Found(ids[at].clone(), artifact, bytes));
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::Profiler;
    use crate::fake::{FakeKernel, FakeTarget};
    use crate::profile::Program;
    use crate::store::ArtifactStore;
    use crate::target::CompilationTarget;
    use crate::{KernelLoader, MemoryStore};

    // L12, F11: the loader's first take reads the profile and looks its
    // kernels up itself when the profile's thread has not begun (here it
    // is held back until the take is over): a thread that starts late
    // holds the program up no longer than the reading takes.
    #[test]
    fn l12_a_profile_whose_thread_has_not_begun_is_read_by_the_first_take() {
        let store: Arc<dyn ArtifactStore> = Arc::new(MemoryStore::new());
        let kernels: Vec<FakeKernel> = (0..4).map(FakeKernel::new).collect();
        let compiler = {
            let mut first = KernelLoader::new(FakeTarget::on_store(Arc::clone(&store)))
                .with_profile(Program::named("held"));
            for kernel in &kernels {
                first.load(kernel, &kernel.artifact_id()).expect("loads");
            }
            Arc::clone(first.target().compiler())
        };
        let (go, hold) = std::sync::mpsc::channel();
        let mut profiler = Profiler::begin("held", store, compiler, Some(hold));
        let taken = Instant::now();
        let mut found = Vec::new();
        profiler.take_each(|id, _, _| found.push(id));
        let took = taken.elapsed();
        let _ = go.send(());
        found.sort_by_key(|id| id.kernel.clone());
        let mut asked: Vec<_> = kernels.iter().map(FakeKernel::artifact_id).collect();
        asked.sort_by_key(|id| id.kernel.clone());
        assert_eq!(found, asked, "every profiled kernel handed over once");
        assert!(
            took < Duration::from_secs(5),
            "the take waited {took:?} for the profile's thread"
        );
        assert!(profiler.previous().is_some(), "the last profile was read");
    }
}
