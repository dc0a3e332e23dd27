//! Claims across machines (P12): a claim is a Redis key holding its
//! holder's lease ([`crate::lease`]), taken by a script when the key is
//! free, renewed by the process's lease thread while held (each renewal
//! writes a later `UNTIL`), and let go by writing a signed release in its
//! place: never a plain `DEL`, which would free another holder's newer
//! lease.
//!
//! A lease is the holder's word, and only a word that verifies is
//! honoured: a value that does not verify, or claims to outlive a lease's
//! length, is written over, so a writer of the remote without the key can
//! make a node compile, never make it wait. A verified lease seen once is
//! remembered until its `UNTIL`: a lease deleted under a waiter does not
//! free its key (a release says so, signed), and a holder whose lease was
//! deleted writes it again at its next renewal. Every lease taken,
//! renewed or let go is announced too ([`crate::announce`]): a key whose
//! lease was deleted is not taken by a node that heard the lease, and a
//! node that took it before hearing gives it back.
//!
//! The lease only ever saves work: a remote that cannot be reached gives
//! [`Claim::Uncoordinated`] and the key compiles here, and a lost lease
//! costs at most one duplicate compile.

pub(crate) mod renewal;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiln_engine::StoreKey;
use kiln_engine::store::{Claim, ClaimGuard, ClaimWait, Renewal, hex};
use redis::{Cmd, Value, cmd};

use crate::announce;
use crate::keygen;
use crate::lease::{self, Word};
use crate::remote::{Inner, RemoteStore};
use crate::statistics::bump;

/// The scripts read at most the first 4 KiB of a claim's value (a lease
/// is a line): a value a writer without the key made large costs Redis
/// and this node nothing, and is void.
///
/// The scripts announce with `pcall`: a Redis user not allowed to publish
/// (an ACL without channels) still claims, from the keys alone.
///
/// Takes the claim (`KEYS[1]`) with the lease `ARGV[1]` for `ARGV[2]`
/// milliseconds when it is absent and `ARGV[4]` is `1`, or holds exactly
/// `ARGV[3]` (a value the caller found void or let go); a key of another
/// type is nobody's lease and is replaced. A lease taken is announced on
/// the channel `ARGV[5]` as `ARGV[6]` (the subject) and the lease
/// ([`crate::announce`]). Gives 1 when taken, else `{0}` (absent) or
/// `{0, value, pttl}`.
const CLAIM: &str = "local kind = redis.call('type', KEYS[1]).ok \
    if kind ~= 'string' and kind ~= 'none' then redis.call('del', KEYS[1]) kind = 'none' end \
    local old = false \
    if kind == 'string' then old = redis.call('getrange', KEYS[1], 0, 4095) end \
    if (not old and ARGV[4] == '1') or (old and old == ARGV[3]) then \
      redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
      if ARGV[5] then redis.pcall('publish', ARGV[5], ARGV[6] .. ' ' .. ARGV[1]) end \
      return 1 end \
    if not old then return {0} end \
    return {0, old, redis.call('pttl', KEYS[1])}";

/// Renews the lease whose values start with `ARGV[1]` with the value
/// `ARGV[2]` for `ARGV[3]` milliseconds, writing it again when it was
/// deleted, and announces it on `ARGV[4]` as `ARGV[5]` and the lease
/// whoever is there: 1, or the value of whoever else is there.
pub(crate) const RENEW: &str = "redis.pcall('publish', ARGV[4], ARGV[5] .. ' ' .. ARGV[2]) \
    local kind = redis.call('type', KEYS[1]).ok \
    if kind == 'string' then \
      local old = redis.call('getrange', KEYS[1], 0, 4095) \
      if string.sub(old, 1, #ARGV[1]) ~= ARGV[1] then return old end \
    elseif kind ~= 'none' then redis.call('del', KEYS[1]) end \
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
    return 1";

/// Writes the release `ARGV[2]` for `ARGV[3]` milliseconds in place of the
/// lease whose values start with `ARGV[1]`, if it is still there, and
/// announces the release on `ARGV[4]` as `ARGV[5]` and the release
/// whatever was there: those who heard the lease stop honouring it even
/// when its key was deleted.
const RELEASE: &str = "redis.pcall('publish', ARGV[4], ARGV[5] .. ' ' .. ARGV[2]) \
    if redis.call('type', KEYS[1]).ok ~= 'string' then return 0 end \
    local old = redis.call('getrange', KEYS[1], 0, 4095) \
    if string.sub(old, 1, #ARGV[1]) ~= ARGV[1] then return 0 end \
    redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) \
    return 1";

/// The first pause of a patient claimant between tries; it doubles up to
/// [`LONGEST_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(5);
const LONGEST_POLL: Duration = Duration::from_millis(100);

/// How far the clocks of two machines may differ and a lease's `UNTIL`
/// still be believed.
const CLOCK_SKEW: Duration = Duration::from_secs(1);

/// What one try at the remote claim got.
pub(crate) enum Attempt {
    /// Held: released when dropped.
    Held(RemoteLease),
    /// Another holder's.
    Busy,
    /// The remote did not answer, or this node does not write.
    Unreachable,
    /// Lost to a value that does not verify, written between this node's
    /// read and its write (a writer without the key rotating its
    /// forgeries): nobody the fleet trusts holds the key, so it compiles
    /// here now, without a lease, instead of waiting (P12).
    Contested,
    /// Not taken: the entry read with the claim verifies, so there is
    /// nothing to compile.
    Published,
}

/// A held remote claim: let go, by writing its release, when dropped.
pub(crate) struct RemoteLease {
    inner: Arc<Inner>,
    subject: [u8; 32],
    claim_key: String,
    token: String,
    /// Whether its release was sent already ([`release_all`]).
    released: bool,
}

impl RemoteLease {
    /// The command that lets this lease go, once.
    pub(crate) fn release_command(&mut self) -> Option<Cmd> {
        if std::mem::replace(&mut self.released, true) {
            return None;
        }
        let inner = &self.inner;
        inner.renewing.remove(&self.token);
        let released = lease::free(&inner.config.keys, &self.subject, &self.token)?;
        let mut command = cmd("EVAL");
        command
            .arg(RELEASE)
            .arg(1)
            .arg(&self.claim_key)
            .arg(lease::prefix(&self.token))
            .arg(released)
            // Outlives every honoured copy of the lease it replaces.
            .arg(millis(inner.config.lease * 2 + CLOCK_SKEW))
            .arg(announce::script_arguments(
                inner.announcements.channel(),
                &self.subject,
            ));
        Some(command)
    }
}

impl Drop for RemoteLease {
    fn drop(&mut self) {
        let Some(command) = self.release_command() else {
            return;
        };
        // A release that cannot reach the remote leaves the lease to run
        // out: waiters lose at most the lease.
        let inner = &self.inner;
        inner
            .remote
            .call(&inner.counters, move |link| link.query::<i64>(&command));
    }
}

/// Lets `leases` go in one round trip (one per shard of a cluster).
pub(crate) fn release_all(leases: Vec<RemoteLease>) {
    let Some(inner) = leases.first().map(|lease| Arc::clone(&lease.inner)) else {
        return;
    };
    let commands: Vec<Cmd> = leases
        .into_iter()
        .filter_map(|mut lease| lease.release_command())
        .collect();
    if commands.is_empty() {
        return;
    }
    inner.remote.call(&inner.counters, move |link| {
        link.pipeline::<Vec<Value>>(commands)
    });
}

impl RemoteLease {
    /// Renews the lease every third of it, with the store's other leases
    /// in one round trip.
    pub(crate) fn renewal(&self) -> Renewal {
        renewal::Renewing::add(
            &self.inner,
            self.subject,
            self.claim_key.clone(),
            self.token.clone(),
        )
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn wall_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// A new claim's token: random, unique per claim.
fn new_token() -> String {
    keygen::random_bytes().map_or_else(
        |_| hex(blake3::hash(format!("{:?}", Instant::now()).as_bytes()).as_bytes()),
        |bytes| hex(&bytes[..16]),
    )
}

/// The value of this process's lease `token` on `subject`, good for one
/// lease from now; `None` when this node cannot sign.
pub(crate) fn lease_value(inner: &Inner, subject: &[u8; 32], token: &str) -> Option<String> {
    let until = wall_millis().saturating_add(millis(inner.config.lease));
    lease::held(
        &inner.config.keys,
        subject,
        token,
        std::process::id(),
        until,
        &inner.host,
    )
}

/// What a value found under the claim of `subject` is worth: a verified
/// lease only while its word holds and it claims no more than a lease's
/// length (its `pttl`, when known, included); anything else is void.
pub(crate) fn judge(inner: &Inner, subject: &[u8; 32], value: &[u8], pttl: Option<i64>) -> Word {
    let word = lease::read(&inner.config.keys, subject, value);
    let Word::Held { until, .. } = &word else {
        return word;
    };
    let longest = millis(inner.config.lease + CLOCK_SKEW);
    let now = wall_millis();
    let too_long = pttl.is_some_and(|pttl| pttl < 0 || pttl.unsigned_abs() > longest)
        || until.saturating_sub(now) > longest;
    let run_out = now > until.saturating_add(millis(CLOCK_SKEW));
    if too_long || run_out {
        Word::Void
    } else {
        word
    }
}

/// How long this node honours a verified lease whose word holds until
/// `until` (the holder's clock): never longer than a lease from now, nor
/// past the time Redis keeps its key (`pttl`, Redis's own clock, when
/// known): once the key is gone anyone may take it, and a waiter that
/// honoured it longer would only wait for nobody.
fn honoured_for(inner: &Inner, until: u64, pttl: Option<i64>) -> Duration {
    let left = until
        .saturating_add(millis(CLOCK_SKEW))
        .saturating_sub(wall_millis());
    let honoured = Duration::from_millis(left).min(inner.config.lease + CLOCK_SKEW);
    match pttl {
        Some(pttl) if pttl > 0 => honoured.min(Duration::from_millis(pttl.unsigned_abs())),
        _ => honoured,
    }
}

pub(crate) fn claim_command(
    inner: &Inner,
    subject: &[u8; 32],
    claim_key: &str,
    value: &str,
    replaceable: Option<&[u8]>,
    take_absent: bool,
) -> Cmd {
    let mut command = cmd("EVAL");
    command
        .arg(CLAIM)
        .arg(1)
        .arg(claim_key)
        .arg(value)
        .arg(millis(inner.config.lease))
        .arg(replaceable.unwrap_or_default())
        .arg(if take_absent { "1" } else { "0" })
        .arg(announce::script_arguments(
            inner.announcements.channel(),
            subject,
        ));
    command
}

/// What the claim script answered.
enum Found {
    Taken,
    Absent,
    Value(Vec<u8>, i64),
    Unreachable,
}

/// What the claim script answered with `reply`.
fn found(reply: &Value) -> Found {
    match reply {
        Value::Int(1) => Found::Taken,
        Value::Array(values) => match values.as_slice() {
            [Value::Int(0)] => Found::Absent,
            [Value::Int(0), Value::BulkString(value), Value::Int(pttl)] => {
                Found::Value(value.clone(), *pttl)
            }
            _ => Found::Unreachable,
        },
        // Anything else is no Redis this store understands.
        _ => Found::Unreachable,
    }
}

/// One try at `key`'s remote claim.
pub(crate) fn attempt(store: &RemoteStore, key: &StoreKey) -> Attempt {
    attempt_many(store, std::slice::from_ref(key), &[], None)
        .0
        .pop()
        .expect("one attempt per key")
}

/// Whether the entry read for the key at a place verifies.
pub(crate) type Verifies<'a> = &'a dyn Fn(usize, &Value) -> bool;

/// One claim being tried.
struct Try {
    subject: [u8; 32],
    claim_key: String,
    token: String,
    value: String,
}

/// One try at the remote claim of each of `keys`, in one round trip (one
/// per shard of a cluster), and a second for those whose claim held a
/// void lease or a release; `also` (commands sent in the first round
/// trip, after the claims) gives its replies too, `None` when the remote
/// did not answer. With `published` (`also` then holds one read of each
/// key's entry, in order), a key whose claim was let go or void and whose
/// entry read verifies is not tried a second time: [`Attempt::Published`].
pub(crate) fn attempt_many(
    store: &RemoteStore,
    keys: &[StoreKey],
    also: &[Cmd],
    published: Option<Verifies<'_>>,
) -> (Vec<Attempt>, Option<Vec<Value>>) {
    let unreachable = || keys.iter().map(|_| Attempt::Unreachable).collect();
    if !store.writes() || keys.is_empty() {
        return (unreachable(), None);
    }
    let inner = &store.inner;
    let announcements = &inner.announcements;
    announcements.start_and_wait(!inner.remote.breaker.is_open());
    let mut tries = Vec::with_capacity(keys.len());
    for key in keys {
        let subject = key.digest();
        let token = new_token();
        let Some(value) = lease_value(inner, &subject, &token) else {
            return (unreachable(), None);
        };
        tries.push(Try {
            subject,
            claim_key: store.redis_key("c", &subject),
            token,
            value,
        });
    }
    // A key some lease was seen or heard on is not taken when found
    // absent: someone deleted that lease.
    let honoured: Vec<bool> = tries
        .iter()
        .map(|one| {
            inner.seen.honoured(&one.subject).is_some()
                || announcements.holder(&one.subject).is_some()
        })
        .collect();
    let tokens: Vec<&str> = tries.iter().map(|one| one.token.as_str()).collect();
    announcements.expect(tokens.iter().copied());
    let mut commands: Vec<Cmd> = tries
        .iter()
        .zip(&honoured)
        .map(|(one, honoured)| {
            claim_command(
                inner,
                &one.subject,
                &one.claim_key,
                &one.value,
                None,
                !honoured,
            )
        })
        .collect();
    commands.extend(also.iter().cloned());
    let replies = inner.remote.call(&inner.counters, move |link| {
        link.pipeline::<Vec<Value>>(commands)
    });
    let Some(mut replies) = replies.filter(|replies| replies.len() == tries.len() + also.len())
    else {
        announcements.forget(tokens.iter().copied());
        return (unreachable(), None);
    };
    let mut read = replies.split_off(tries.len());
    if published.is_some() {
        // The entries' reads: the long values read in pieces, outside any
        // script (one more round trip, only when some entry is there).
        let entries: Vec<String> = keys.iter().map(|key| store.entry_key(key)).collect();
        let limit = inner.config.max_entry_bytes;
        store.complete_reads(&entries, &mut read, limit, u64::MAX);
    }
    let is_published = |index: usize| {
        published
            .is_some_and(|published| read.get(index).is_some_and(|value| published(index, value)))
    };
    let lease_of = |one: &Try| RemoteLease {
        inner: Arc::clone(inner),
        subject: one.subject,
        claim_key: one.claim_key.clone(),
        token: one.token.clone(),
        released: false,
    };
    let busy = || {
        bump(&inner.counters.claims_busy);
        Attempt::Busy
    };
    // `None`: taken, to be judged by what the channel says; or tried again.
    let mut attempts: Vec<Option<Attempt>> = Vec::with_capacity(tries.len());
    let mut taken = Vec::new();
    let mut again = Vec::new();
    for ((index, one), reply) in tries.iter().enumerate().zip(&replies) {
        let (found, pttl) = match found(reply) {
            Found::Taken => {
                attempts.push(None);
                taken.push(index);
                continue;
            }
            Found::Unreachable => {
                attempts.push(Some(Attempt::Unreachable));
                continue;
            }
            // Deleted under a lease this node saw or heard: it still holds.
            Found::Absent => {
                attempts.push(Some(busy()));
                continue;
            }
            Found::Value(found, pttl) => (found, pttl),
        };
        match judge(inner, &one.subject, &found, Some(pttl)) {
            Word::Held { token: theirs, .. } if theirs == one.token => {
                attempts.push(None);
                taken.push(index);
            }
            Word::Held {
                token: theirs,
                until,
                ..
            } => {
                let honoured_until = Instant::now() + honoured_for(inner, until, Some(pttl));
                inner.seen.remember(one.subject, theirs, honoured_until);
                attempts.push(Some(busy()));
            }
            Word::Free { .. } | Word::Void if is_published(index) => {
                attempts.push(Some(Attempt::Published));
            }
            Word::Free { token: theirs } => {
                inner.seen.forget(&one.subject, &theirs);
                if announcements
                    .holder(&one.subject)
                    .is_some_and(|held| held != theirs)
                {
                    // Let go by one who came after the holder heard first.
                    attempts.push(Some(busy()));
                } else {
                    attempts.push(None);
                    again.push((index, found));
                }
            }
            Word::Void => {
                bump(&inner.counters.leases_ignored);
                if honoured[index] {
                    // Garbage written over a lease this node saw: that
                    // lease still holds until its word runs out.
                    attempts.push(Some(busy()));
                } else {
                    attempts.push(None);
                    again.push((index, found));
                }
            }
        }
    }
    if !again.is_empty() {
        let commands: Vec<Cmd> = again
            .iter()
            .map(|(index, found)| {
                let one = &tries[*index];
                claim_command(
                    inner,
                    &one.subject,
                    &one.claim_key,
                    &one.value,
                    Some(found),
                    true,
                )
            })
            .collect();
        let replies = inner.remote.call(&inner.counters, move |link| {
            link.pipeline::<Vec<Value>>(commands)
        });
        for (place, (index, _)) in again.iter().enumerate() {
            match replies.as_ref().and_then(|replies| replies.get(place)) {
                None => attempts[*index] = Some(Attempt::Unreachable),
                Some(reply) => match found(reply) {
                    Found::Taken => taken.push(*index),
                    Found::Unreachable => attempts[*index] = Some(Attempt::Unreachable),
                    Found::Value(value, pttl) => {
                        let one = &tries[*index];
                        attempts[*index] =
                            Some(match judge(inner, &one.subject, &value, Some(pttl)) {
                                // Someone the fleet trusts came first.
                                Word::Held {
                                    token: theirs,
                                    until,
                                    ..
                                } => {
                                    let honoured_until =
                                        Instant::now() + honoured_for(inner, until, Some(pttl));
                                    inner.seen.remember(one.subject, theirs, honoured_until);
                                    busy()
                                }
                                // A value nobody trusts changed under this
                                // node's compare-and-set: no lease to wait
                                // for, whatever the round trip (P12).
                                Word::Void | Word::Free { .. } => {
                                    bump(&inner.counters.claims_contested);
                                    Attempt::Contested
                                }
                            });
                    }
                    // Deleted in between: nobody holds it.
                    Found::Absent => {
                        bump(&inner.counters.claims_contested);
                        attempts[*index] = Some(Attempt::Contested);
                    }
                },
            }
        }
    }
    // Every lease taken was announced: once this node hears its own, it
    // has heard every one before, and the first still held has the key.
    let mine: Vec<&str> = taken
        .iter()
        .map(|index| tries[*index].token.as_str())
        .collect();
    if !mine.is_empty() && announcements.listening() {
        announcements.hear(&mine);
    }
    announcements.forget(tokens.iter().copied());
    let mut yielded = Vec::new();
    for index in taken {
        let one = &tries[index];
        let lease = lease_of(one);
        match announcements.holder(&one.subject) {
            Some(first) if first != one.token => {
                bump(&inner.counters.leases_yielded);
                yielded.push(lease);
                attempts[index] = Some(busy());
            }
            _ => {
                bump(&inner.counters.claims_held);
                attempts[index] = Some(Attempt::Held(lease));
            }
        }
    }
    release_all(yielded);
    let attempts = attempts
        .into_iter()
        .map(|attempt| attempt.expect("every key was tried"))
        .collect();
    (attempts, Some(read))
}

/// A patient or single try at `key`'s remote claim, as
/// [`Claims::claim`](kiln_engine::Claims::claim) describes.
pub(crate) fn attempt_waiting(store: &RemoteStore, key: &StoreKey, wait: ClaimWait) -> Attempt {
    let first = attempt(store, key);
    if !matches!(first, Attempt::Busy) || wait == ClaimWait::Once {
        return first;
    }
    let counters = &store.inner.counters;
    bump(&counters.claims_waited);
    let deadline = Instant::now() + store.inner.config.claim_timeout;
    let mut pause = FIRST_POLL;
    loop {
        let now = Instant::now();
        if now >= deadline {
            bump(&counters.claims_timed_out);
            log::info!(
                "kiln: gave up waiting for another machine's claim after {:?}; compiling here \
                 too",
                store.inner.config.claim_timeout
            );
            return Attempt::Busy;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(LONGEST_POLL);
        match attempt(store, key) {
            Attempt::Busy => {}
            other => return other,
        }
    }
}

impl RemoteStore {
    /// The remote store's own claim: a lease on Redis.
    pub(crate) fn claim_lease(&self, key: &StoreKey, wait: ClaimWait) -> Claim {
        match attempt_waiting(self, key, wait) {
            Attempt::Held(lease) => {
                let renewal = lease.renewal();
                Claim::Held(ClaimGuard::leased(lease, renewal))
            }
            Attempt::Busy => Claim::Busy,
            Attempt::Unreachable | Attempt::Contested | Attempt::Published => Claim::Uncoordinated,
        }
    }

    /// Who holds each of `keys`' claims on the remote, as
    /// [`lease_holder`](Self::lease_holder) says, in one round trip.
    pub(crate) fn lease_holders(&self, keys: &[StoreKey]) -> Vec<Option<String>> {
        let subjects: Vec<[u8; 32]> = keys.iter().map(StoreKey::digest).collect();
        let commands: Vec<Cmd> = subjects
            .iter()
            .map(|subject| {
                let mut command = cmd("GETRANGE");
                command.arg(self.redis_key("c", subject)).arg(0).arg(4095);
                command
            })
            .collect();
        let inner = &self.inner;
        let Some(values) = inner.remote.call(&inner.counters, move |link| {
            link.pipeline::<Vec<Option<Vec<u8>>>>(commands)
        }) else {
            return keys.iter().map(|_| None).collect();
        };
        subjects
            .iter()
            .zip(values.into_iter().chain(std::iter::repeat(None)))
            .map(
                |(subject, value)| match judge(inner, subject, &value?, None) {
                    Word::Held { pid, host, .. } => {
                        Some(format!("process {pid} on {}", lease::printable_host(&host)))
                    }
                    _ => None,
                },
            )
            .collect()
    }

    /// Who holds `key`'s claim on the remote (`process 4242 on build-3`),
    /// when a verified lease says so: one `GETRANGE`, under the store's timeout
    /// and breaker. The host is another machine's word: its control
    /// characters are removed before anyone shows it.
    pub(crate) fn lease_holder(&self, key: &StoreKey) -> Option<String> {
        let subject = key.digest();
        // A lease is short: a long value there is nobody's, never read.
        let mut command = cmd("GETRANGE");
        command.arg(self.redis_key("c", &subject)).arg(0).arg(4095);
        let inner = &self.inner;
        let value = inner
            .remote
            .call(&inner.counters, move |link| {
                link.query::<Option<Vec<u8>>>(&command)
            })
            .flatten()?;
        match judge(inner, &subject, &value, None) {
            Word::Held { pid, host, .. } => {
                Some(format!("process {pid} on {}", lease::printable_host(&host)))
            }
            _ => None,
        }
    }
}
