//! Claims announced (P12): every lease a claim script takes, renews or lets
//! go is also published on the fleet's channel, and every node that claims
//! listens. A deleted key can be written again; a message already sent
//! cannot be taken back. So the order of the channel, which is the same
//! for every listener, says who came first for a key, whatever was deleted
//! in between:
//!
//! - a listener honours, for each key, the first verified lease announced
//!   that is neither let go nor run out (later ones are someone who found
//!   the key deleted);
//! - a node that took a key waits (at most the timeout) until it hears its
//!   own announcement: every announcement before it was heard too, and if
//!   one of them is another's lease still held, this node gives the key
//!   back instead of compiling it.
//!
//! A writer of Redis without the key can delete every key, never unsend a
//! lease or forge one; a lease it copies onto the channel holds for its
//! key until that lease's own word runs out, and a released token is never
//! honoured again. A node that does not hear the channel (not subscribed
//! yet, its subscription dropped) claims as it would without it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use kiln_engine::store::hex;

use crate::keys::Keys;
use crate::lease::{self, Word};
use crate::subscription::{Heard, Subscription};

/// How often the listener looks up from the channel to see whether its
/// store is still there.
const LOOK_UP: Duration = Duration::from_millis(200);

/// How many keys' holders, released tokens and awaited tokens a listener
/// remembers; past it, expired ones go, and then new ones are not kept
/// (which costs at most a duplicate compile).
const REMEMBERED: usize = 1 << 16;

/// The listener of a store: what it heard, and the thread that hears it.
pub(crate) struct Announcements {
    shared: Arc<Shared>,
    /// When listening started (the listener's thread was asked for).
    started_at: OnceLock<Instant>,
    /// Where to listen: the server, or a cluster's first node (a cluster
    /// carries what is published on any node to every node).
    server: redis::ConnectionInfo,
    /// The PEM text of the CA certificates a TLS server's certificate
    /// must chain to (`None`: the system's).
    ca: Option<Arc<[u8]>>,
    keys: Keys,
    /// How long a lease lasts, and how long a release is remembered.
    lease: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for Announcements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Announcements")
            .field("channel", &self.shared.channel)
            .field("listening", &self.shared.state().listening)
            .finish_non_exhaustive()
    }
}

struct Shared {
    channel: String,
    state: Mutex<State>,
    /// Signalled on every announcement heard and when listening changes.
    heard: Condvar,
    /// Set when the store goes: the listener ends.
    closed: AtomicBool,
    /// Set when no listener could be started: nobody waits for one.
    gave_up: AtomicBool,
    /// What announces this store's leases again, when a node says hello.
    on_hello: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// Set once a message too long to be a claim's was dropped: said once a
/// process, whatever its stores.
static WARNED_LARGE: AtomicBool = AtomicBool::new(false);

#[derive(Default)]
struct State {
    /// Whether the channel is being heard now.
    listening: bool,
    /// The first held lease announced for each key: its token and until
    /// when it is honoured.
    holders: HashMap<[u8; 32], (String, Instant)>,
    /// Tokens let go, never honoured again, until when that is kept.
    freed: HashMap<String, Instant>,
    /// Tokens this node waits to hear, and those heard.
    awaited: HashSet<String>,
    arrived: HashSet<String>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the scripts append to their arguments so that they announce: the
/// channel and the subject in hex (the message is `SUBJECT VALUE`).
pub(crate) fn script_arguments(channel: &str, subject: &[u8; 32]) -> Vec<String> {
    vec![channel.to_owned(), hex(subject)]
}

impl Announcements {
    pub(crate) fn new(
        channel: String,
        server: redis::ConnectionInfo,
        ca: Option<&[u8]>,
        keys: Keys,
        lease: Duration,
        timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                channel,
                state: Mutex::new(State::default()),
                heard: Condvar::new(),
                closed: AtomicBool::new(false),
                gave_up: AtomicBool::new(false),
                on_hello: OnceLock::new(),
            }),
            started_at: OnceLock::new(),
            server,
            ca: ca.map(Arc::from),
            keys,
            lease,
            timeout,
        }
    }

    /// Sets what announces the store's leases again when another node
    /// starts listening.
    pub(crate) fn on_hello(&self, announce_again: impl Fn() + Send + Sync + 'static) {
        let _ = self.shared.on_hello.set(Box::new(announce_again));
    }

    pub(crate) fn channel(&self) -> &str {
        &self.shared.channel
    }

    /// Starts listening, once, on a thread of its own; returns at once. A
    /// batch that may claim calls it before its lookup, so that the
    /// channel is heard (its hello answered) by the time its first claim
    /// goes, instead of that claim paying for the subscription.
    pub(crate) fn start(&self) {
        if self.started_at.get().is_some() {
            return;
        }
        if self.started_at.set(Instant::now()).is_err() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let server = self.server.clone();
        let ca = self.ca.clone();
        let keys = self.keys.clone();
        let (lease, timeout) = (self.lease, self.timeout);
        let spawned = std::thread::Builder::new()
            .name("kiln-remote-listen".into())
            .spawn(move || listen(&shared, &server, ca.as_deref(), &keys, lease, timeout));
        if spawned.is_err() {
            // Without a listener, claims go as they would without it.
            self.shared.gave_up.store(true, Ordering::Release);
        }
    }

    /// Starts listening if not yet ([`start`](Self::start)) and, unless
    /// `wait` is false (the remote is not answering), waits until the
    /// channel is heard, at most a timeout from when listening started:
    /// a node's first claims are judged by it too, and once that timeout
    /// has passed no claim waits for it again.
    pub(crate) fn start_and_wait(&self, wait: bool) {
        self.start();
        if !wait || self.shared.gave_up.load(Ordering::Acquire) {
            return;
        }
        let Some(started) = self.started_at.get() else {
            return;
        };
        let deadline = *started + self.timeout;
        let mut state = self.shared.state();
        while !state.listening {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            state = self
                .shared
                .heard
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Whether the channel is heard now.
    pub(crate) fn listening(&self) -> bool {
        self.shared.state().listening
    }

    /// The token of the lease of `subject` honoured now, if one was heard.
    pub(crate) fn holder(&self, subject: &[u8; 32]) -> Option<String> {
        let mut state = self.shared.state();
        match state.holders.get(subject) {
            Some((token, until)) if Instant::now() < *until => Some(token.clone()),
            Some(_) => {
                state.holders.remove(subject);
                None
            }
            None => None,
        }
    }

    /// Whether the lease `token` was heard let go (and is remembered so).
    pub(crate) fn was_freed(&self, token: &str) -> bool {
        let state = self.shared.state();
        state
            .freed
            .get(token)
            .is_some_and(|kept| Instant::now() < *kept)
    }

    /// Says that this node is about to announce `tokens`: they are kept
    /// when heard, for [`hear`](Self::hear).
    pub(crate) fn expect<'a>(&self, tokens: impl IntoIterator<Item = &'a str>) {
        let mut state = self.shared.state();
        for token in tokens {
            if state.awaited.len() < REMEMBERED {
                state.awaited.insert(token.to_owned());
            }
        }
    }

    /// Waits, at most the timeout, until every one of `tokens` was heard
    /// (or the channel is no longer heard), and forgets them: whether all
    /// were.
    pub(crate) fn hear(&self, tokens: &[&str]) -> bool {
        let deadline = Instant::now() + self.timeout;
        let mut state = self.shared.state();
        let all = loop {
            if tokens.iter().all(|token| state.arrived.contains(*token)) {
                break true;
            }
            let now = Instant::now();
            if !state.listening || now >= deadline {
                break false;
            }
            state = self
                .shared
                .heard
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        for token in tokens {
            state.awaited.remove(*token);
            state.arrived.remove(*token);
        }
        all
    }

    /// Forgets `tokens` this node no longer waits for.
    pub(crate) fn forget<'a>(&self, tokens: impl IntoIterator<Item = &'a str>) {
        let mut state = self.shared.state();
        for token in tokens {
            state.awaited.remove(token);
            state.arrived.remove(token);
        }
    }
}

impl Drop for Announcements {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
    }
}

/// The listener's thread: subscribes, hears, and subscribes again after a
/// dropped connection, until its store goes.
fn listen(
    shared: &Shared,
    server: &redis::ConnectionInfo,
    ca: Option<&[u8]>,
    keys: &Keys,
    lease: Duration,
    timeout: Duration,
) {
    while !shared.closed.load(Ordering::Acquire) {
        let heard = subscribe_and_hear(shared, server, ca, keys, lease, timeout);
        {
            let mut state = shared.state();
            state.listening = false;
        }
        shared.heard.notify_all();
        if let Err(error) = heard {
            log::debug!("kiln: not hearing the fleet's claims ({error}); trying again");
        }
        // Not a busy loop against a remote that is down.
        let mut waited = Duration::ZERO;
        while waited < Duration::from_secs(1) && !shared.closed.load(Ordering::Acquire) {
            std::thread::sleep(LOOK_UP);
            waited += LOOK_UP;
        }
    }
}

fn subscribe_and_hear(
    shared: &Shared,
    server: &redis::ConnectionInfo,
    ca: Option<&[u8]>,
    keys: &Keys,
    lease: Duration,
    timeout: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    // Read on a connection of its own that bounds every message: whoever
    // can write Redis can publish, and some can lift Redis's own limit.
    let mut subscription = Subscription::open(server, ca, &shared.channel, timeout)?;
    let client = redis::Client::open(server.clone())?;
    // A node that starts listening has missed the leases taken before:
    // it says hello, and every holder that hears it announces its leases
    // again at once instead of at its next renewal. Said on a connection
    // of its own: a subscribed one only listens.
    let hello = format!("{HELLO} {}", hello_nonce());
    let asked = Instant::now();
    {
        let mut speaker = client.get_connection_with_timeout(timeout)?;
        speaker.set_read_timeout(Some(timeout))?;
        speaker.set_write_timeout(Some(timeout))?;
        redis::cmd("PUBLISH")
            .arg(&shared.channel)
            .arg(&hello)
            .query::<i64>(&mut speaker)?;
    }
    subscription.set_read_timeout(SETTLING)?;
    // Once its own hello is back, the holders' answers take about as long
    // again: listening counts from then (at most a timeout from now).
    let mut settled_at: Option<Instant> = None;
    let give_up = asked + timeout;
    let mut listening = false;
    loop {
        if shared.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = Instant::now();
        if !listening && (settled_at.is_some_and(|at| now >= at) || now >= give_up) {
            listening = true;
            shared.state().listening = true;
            shared.heard.notify_all();
            subscription.set_read_timeout(LOOK_UP)?;
        }
        let payload = match subscription.next()? {
            Heard::Message(payload) => payload,
            Heard::TooLarge(length) => {
                if !WARNED_LARGE.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "kiln: a message of {length} bytes on the fleet's claims channel {} was \
                         dropped unread (no claim's message is over {} bytes); whoever can write \
                         this Redis can publish there: only kiln's nodes should",
                        shared.channel,
                        crate::subscription::MESSAGE_LIMIT
                    );
                }
                continue;
            }
            Heard::Other | Heard::Nothing => continue,
        };
        let payload = payload.as_slice();
        if payload == hello.as_bytes() {
            let back = asked.elapsed().max(SETTLING);
            settled_at = Some(Instant::now() + back * 2 + SETTLING * 4);
            continue;
        }
        if payload.starts_with(HELLO.as_bytes()) {
            if let Some(announce_again) = shared.on_hello.get() {
                announce_again();
            }
            continue;
        }
        heard(shared, keys, lease, payload);
        shared.heard.notify_all();
    }
}

/// What a node says when it starts listening.
const HELLO: &str = "hello";

/// How often the listener looks up while it waits for the answers to its
/// hello.
const SETTLING: Duration = Duration::from_millis(5);

fn hello_nonce() -> String {
    crate::keygen::random_bytes().map_or_else(
        |_| format!("{:?}", Instant::now()),
        |bytes| hex(&bytes[..8]),
    )
}

/// Takes in one message: `SUBJECT VALUE`, the value as a claim's key
/// holds it. Anything that does not verify is nobody's word.
fn heard(shared: &Shared, keys: &Keys, lease: Duration, payload: &[u8]) {
    let Some((subject, value)) = payload
        .iter()
        .position(|byte| *byte == b' ')
        .map(|at| (&payload[..at], &payload[at + 1..]))
    else {
        return;
    };
    let Some(subject) = unhex_subject(subject) else {
        return;
    };
    let word = lease::read(keys, &subject, value);
    let now = Instant::now();
    let mut state = shared.state();
    match word {
        Word::Held { token, until, .. } => {
            if state.awaited.contains(&token) && state.arrived.len() < REMEMBERED {
                state.arrived.insert(token.clone());
            }
            if state.freed.get(&token).is_some_and(|kept| now < *kept) {
                return;
            }
            let Some(honoured) = honoured_for(until, lease) else {
                return;
            };
            let current = state
                .holders
                .get(&subject)
                .filter(|(_, until)| now < *until)
                .map(|(holder, _)| holder.clone());
            match current {
                // A later claimant: whoever was heard first holds it.
                Some(holder) if holder != token => {}
                _ => {
                    if state.holders.len() >= REMEMBERED {
                        state.holders.retain(|_, (_, until)| now < *until);
                    }
                    if state.holders.len() < REMEMBERED {
                        state.holders.insert(subject, (token, now + honoured));
                    }
                }
            }
        }
        Word::Free { token } => {
            if state
                .holders
                .get(&subject)
                .is_some_and(|(holder, _)| *holder == token)
            {
                state.holders.remove(&subject);
            }
            if state.freed.len() >= REMEMBERED {
                state.freed.retain(|_, kept| now < *kept);
            }
            if state.freed.len() < REMEMBERED {
                // Past this a copy of its lease has run out anyway.
                state.freed.insert(token, now + lease * 2 + CLOCK_SKEW);
            }
        }
        Word::Void => {}
    }
}

/// How far two machines' clocks may differ and a lease's word still be
/// believed (as [`crate::remote::claim`] judges leases).
const CLOCK_SKEW: Duration = Duration::from_secs(1);

/// How long from now a lease whose word holds until `until` (the holder's
/// wall clock, in milliseconds) is honoured: never more than a lease and
/// the skew, nothing once its word ran out.
fn honoured_for(until: u64, lease: Duration) -> Option<Duration> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        });
    let skew = u64::try_from(CLOCK_SKEW.as_millis()).unwrap_or(u64::MAX);
    let longest = lease + CLOCK_SKEW;
    let left = until.saturating_add(skew).checked_sub(now)?;
    if Duration::from_millis(until.saturating_sub(now)) > longest {
        // Claims to outlive a lease: nobody's word.
        return None;
    }
    Some(Duration::from_millis(left).min(longest))
}

fn unhex_subject(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut subject = [0u8; 32];
    for (index, byte) in subject.iter_mut().enumerate() {
        let pair = std::str::from_utf8(&text[index * 2..index * 2 + 2]).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(subject)
}

/// The message a script publishes for `value` under `subject`'s claim.
#[cfg(test)]
fn announced(subject: &[u8; 32], value: &str) -> String {
    format!("{} {value}", hex(subject))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen;

    fn wall_millis() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    }

    #[test]
    fn p12_the_first_lease_heard_holds_and_a_released_token_never_again() {
        let keys = Keys {
            fleet: Some(keygen::fleet_key().unwrap()),
            ..Keys::default()
        };
        let lease = Duration::from_secs(5);
        let announcements = Announcements::new(
            "c".into(),
            "redis://127.0.0.1:1"
                .parse::<redis::ConnectionInfo>()
                .unwrap(),
            None,
            keys.clone(),
            lease,
            Duration::from_millis(50),
        );
        let shared = &announcements.shared;
        let subject = [7u8; 32];
        let until = wall_millis() + 4_000;
        let first = lease::held(&keys, &subject, "aa", 1, until, "one").unwrap();
        let second = lease::held(&keys, &subject, "bb", 2, until, "two").unwrap();
        announcements.expect(["bb"]);
        heard(shared, &keys, lease, announced(&subject, &first).as_bytes());
        heard(
            shared,
            &keys,
            lease,
            announced(&subject, &second).as_bytes(),
        );
        // The second claimant heard itself, after the first.
        assert!(shared.state().arrived.contains("bb"));
        assert_eq!(announcements.holder(&subject).as_deref(), Some("aa"));
        // A forged or stretched lease is nobody's word.
        let stretched = lease::held(&keys, &subject, "cc", 3, until + 60_000, "x").unwrap();
        heard(
            shared,
            &keys,
            lease,
            announced(&[8; 32], &stretched).as_bytes(),
        );
        assert_eq!(announcements.holder(&[8; 32]), None);
        heard(shared, &keys, lease, b"garbage");
        // Let go: nobody holds it, and a copy of the lease is not heard.
        let freed = lease::free(&keys, &subject, "aa").unwrap();
        heard(shared, &keys, lease, announced(&subject, &freed).as_bytes());
        assert_eq!(announcements.holder(&subject), None);
        heard(shared, &keys, lease, announced(&subject, &first).as_bytes());
        assert_eq!(announcements.holder(&subject), None);
        heard(
            shared,
            &keys,
            lease,
            announced(&subject, &second).as_bytes(),
        );
        assert_eq!(announcements.holder(&subject).as_deref(), Some("bb"));
    }
}
