//! The fleet's counts, kept in Redis beside the entries so that `kiln stats`
//! on any machine shows what the remote tier did for every process that
//! used it: each two-level store adds what it counted since its last report
//! when it is flushed. Only a node that writes the remote reports (a
//! read-only node writes nothing there, P10); the counts are not signed
//! and are only ever shown, never acted on.

use kiln_engine::StoreKey;
use redis::cmd;
use serde::{Deserialize, Serialize};

use crate::entry::{self, Kind};
use crate::remote::RemoteStore;

/// The most a listed key (one encoded key) may take to decode.
const KEY_LIMIT: usize = 1 << 20;

/// How many entries one pipelined read of a listing fetches.
const LISTING_CHUNK: usize = 256;

macro_rules! fleet_counts {
    ($($(#[doc = $doc:literal])* $field:ident,)*) => {
        /// What every process that used a remote tier counted, added up in
        /// the remote (`kiln stats`).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct FleetCounts {
            $($(#[doc = $doc])* pub $field: u64,)*
        }

        impl FleetCounts {
            /// Each count with its name in the remote's hash.
            pub(crate) fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field),)*]
            }

            fn set(&mut self, name: &str, value: u64) {
                match name {
                    $(stringify!($field) => self.$field = value,)*
                    // A count a newer kiln added: shown by that kiln.
                    _ => {}
                }
            }

            /// What `self` counted beyond `earlier`.
            pub(crate) fn since(&self, earlier: &Self) -> Self {
                Self { $($field: self.$field.saturating_sub(earlier.$field),)* }
            }
        }
    };
}

fleet_counts! {
    /// Processes that reported.
    processes,
    /// Lookups the local store missed and the remote answered.
    remote_hits,
    /// Lookups the remote did not hold.
    remote_misses,
    /// Remote entries that did not verify: never loaded.
    unverified,
    /// Remote calls that ran past the timeout.
    timeouts,
    /// Remote calls that failed otherwise.
    errors,
    /// Times a process's breaker opened.
    breaker_opened,
    /// Calls not made because a breaker was open.
    skipped_while_open,
    /// Artifacts written to the remote.
    written,
    /// Remote writes that failed.
    write_failures,
    /// Remote writes dropped because a process's write queue was full.
    queue_dropped,
    /// Publishes refused because another host had stored other bytes under
    /// the key (nondeterministic compiles).
    nondeterministic,
}

impl FleetCounts {
    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(|(_, value)| *value == 0)
    }
}

/// The keys of the artifact entries a remote holds (`kiln pull`).
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Every key listed by a verified entry.
    pub keys: Vec<StoreKey>,
    /// Listed keys whose entry did not verify or decode: never used.
    pub refused: u64,
}

/// Adds each count `ARGV[2i+1]` to the field `ARGV[2i]` of the counts'
/// hash `KEYS[1]`. Anyone can write Redis: a field that holds no number (or
/// would overflow) is bad data for that count alone, and starts again from
/// what is added; a key that is no hash is replaced.
const ADD_COUNTS: &str = "local kind = redis.call('type', KEYS[1]).ok \
    if kind ~= 'hash' and kind ~= 'none' then redis.call('del', KEYS[1]) end \
    for i = 1, #ARGV, 2 do \
      local added = redis.pcall('hincrby', KEYS[1], ARGV[i], ARGV[i + 1]) \
      if type(added) == 'table' and added.err then \
        redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1]) end \
    end \
    return 1";

impl RemoteStore {
    fn counts_key(&self) -> String {
        format!("{}stats", self.inner.config.prefix)
    }

    /// The counts every reporting process added to the remote, or `None`
    /// when it does not answer.
    pub fn fleet_counts(&self) -> Option<FleetCounts> {
        let mut command = cmd("HGETALL");
        command.arg(self.counts_key());
        let pairs = self.inner.remote.call(&self.inner.counters, move |link| {
            link.query::<Vec<(String, String)>>(&command)
        })?;
        let mut counts = FleetCounts::default();
        // A field that holds no number (anyone can write Redis) counts
        // nothing; the remote still answers.
        for (name, value) in pairs {
            if let Ok(value) = value.parse() {
                counts.set(&name, value);
            }
        }
        Some(counts)
    }

    /// Adds `counts` to the fleet's; `true` when the remote took them. A
    /// node that does not write reports nothing.
    pub(crate) fn add_fleet_counts(&self, counts: &FleetCounts) -> bool {
        if !self.writes() || counts.is_empty() {
            return true;
        }
        let mut command = cmd("EVAL");
        command.arg(ADD_COUNTS).arg(1).arg(self.counts_key());
        for (name, value) in counts.fields() {
            if value > 0 {
                command.arg(name).arg(value);
            }
        }
        self.inner
            .remote
            .call(&self.inner.counters, move |link| {
                link.query::<i64>(&command)
            })
            .is_some()
    }

    /// Sets the fleet's counts to zero; `false` when this node does not
    /// write or the remote did not answer.
    pub fn zero_fleet_counts(&self) -> bool {
        if !self.writes() {
            return false;
        }
        let mut command = cmd("DEL");
        command.arg(self.counts_key());
        self.inner
            .remote
            .call(&self.inner.counters, move |link| {
                link.query::<i64>(&command)
            })
            .is_some()
    }

    /// Every key the remote holds an artifact entry for, read from the
    /// signed key entries written beside them; `None` when the remote does
    /// not answer. Each listed key is verified as an entry is; what does
    /// not verify is counted in [`Listing::refused`] and never returned.
    pub fn stored_keys(&self) -> Option<Listing> {
        let inner = &self.inner;
        let prefix = format!("{}k:", inner.config.prefix);
        let pattern = format!("{}*", glob_escaped(&prefix));
        let mut names = inner
            .remote
            .call(&inner.counters, move |link| link.keys_matching(&pattern))?;
        names.sort_unstable();
        names.dedup();
        let mut listing = Listing::default();
        let subjects: Vec<[u8; 32]> = names
            .iter()
            .filter_map(|name| name.strip_prefix(prefix.as_bytes()))
            .filter_map(digest_from_hex)
            .collect();
        for chunk in subjects.chunks(LISTING_CHUNK) {
            let commands = chunk
                .iter()
                .map(|subject| {
                    let mut command = cmd("GET");
                    command.arg(self.redis_key("k", subject));
                    command
                })
                .collect();
            let values = inner.remote.call(&inner.counters, move |link| {
                link.pipeline::<Vec<Option<Vec<u8>>>>(commands)
            })?;
            for (subject, value) in chunk.iter().zip(values) {
                // Gone since it was listed: its time ran out.
                let Some(value) = value else { continue };
                let config = bincode::config::standard().with_limit::<KEY_LIMIT>();
                let key = entry::open(&inner.config.keys, Kind::Key, subject, &value)
                    .ok()
                    .and_then(|verified| {
                        bincode::serde::decode_from_slice::<StoreKey, _>(&verified.payload, config)
                            .ok()
                    })
                    .map(|(key, _)| key)
                    .filter(|key| key.digest() == *subject);
                match key {
                    Some(key) => listing.keys.push(key),
                    None => listing.refused += 1,
                }
            }
        }
        Some(listing)
    }
}

/// `text` with the characters a `MATCH` pattern treats specially escaped.
pub(crate) fn glob_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if matches!(character, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(character);
    }
    escaped
}

/// The 32 bytes 64 lower-case hex digits spell.
pub(crate) fn digest_from_hex(text: &[u8]) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let digit = |byte: u8| (byte as char).to_digit(16).map(|value| value as u8);
    let mut digest = [0u8; 32];
    for (index, pair) in text.chunks_exact(2).enumerate() {
        digest[index] = digit(pair[0])? * 16 + digit(pair[1])?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_with_pattern_characters_matches_only_itself() {
        assert_eq!(glob_escaped("kiln:k:"), "kiln:k:");
        assert_eq!(glob_escaped("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn only_a_whole_digest_in_hex_is_read() {
        let digest = [0xab; 32];
        let text = kiln_engine::store::hex(&digest);
        assert_eq!(digest_from_hex(text.as_bytes()), Some(digest));
        assert_eq!(digest_from_hex(&text.as_bytes()[1..]), None);
        assert_eq!(digest_from_hex(&[b'z'; 64]), None);
    }
}
