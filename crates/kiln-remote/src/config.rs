//! Where the remote tier is and how it behaves: built in code or read from
//! `KILN_REMOTE_*` variables.
//!
//! | variable | setting | default |
//! | --- | --- | --- |
//! | `KILN_REMOTE_URL` | [`RemoteConfig::url`] | none: no remote tier |
//! | `KILN_REMOTE_KEY`, `KILN_REMOTE_SIGNING_KEY`, `KILN_REMOTE_TRUSTED_KEYS` | [`RemoteConfig::keys`] | none: the remote refuses to open |
//! | `KILN_REMOTE_TIMEOUT` | [`RemoteConfig::timeout`] | 0.5 seconds |
//! | `KILN_REMOTE_RETRY_AFTER` | [`RemoteConfig::retry_after`] | 5 seconds |
//! | `KILN_REMOTE_TTL` | [`RemoteConfig::ttl`] | 7 days |
//! | `KILN_REMOTE_MAX_ENTRY` | [`RemoteConfig::max_entry_bytes`] | 64 MiB; `512M`, `1G` |
//! | `KILN_REMOTE_READ_ONLY=1` | [`RemoteConfig::read_only`] | writes when a key can sign |
//! | `KILN_REMOTE_PREFIX` | [`RemoteConfig::prefix`] | `kiln:` |
//! | `KILN_REMOTE_CA` | [`RemoteConfig::ca_file`] | the system's CA certificates |

use std::path::PathBuf;
use std::time::Duration;

use kiln_engine::store::{DEFAULT_CLAIM_TIMEOUT, DEFAULT_LEASE};

use crate::error::{Error, Result};
use crate::keys::Keys;

/// The longest any one setting of time may be: a day.
const MOST: Duration = Duration::from_secs(86_400);

/// Everything a [`RemoteStore`](crate::RemoteStore) needs.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// `redis://HOST:PORT[/DB]` or `redis+cluster://HOST:PORT,HOST:PORT,...`;
    /// `rediss://` and `rediss+cluster://` for TLS.
    pub url: String,
    /// A PEM file of the CA certificates that sign the server's
    /// certificate, for `rediss://`; `None` trusts the system's.
    pub ca_file: Option<PathBuf>,
    /// What signs and verifies entries (P10).
    pub keys: Keys,
    /// The longest one remote call (connect, or a round trip) may take.
    pub timeout: Duration,
    /// How long the remote is left alone after a failed call before it is
    /// asked again (doubling while it keeps failing, up to a minute).
    pub retry_after: Duration,
    /// How long an entry lives in the remote unless written again.
    pub ttl: Duration,
    /// The largest value written; a larger artifact is a counted failed
    /// write, never a truncated entry.
    pub max_entry_bytes: u64,
    /// Reads only: writes nothing, removes nothing, claims nothing.
    pub read_only: bool,
    /// What every key this store writes starts with, so one Redis can
    /// serve several fleets or tests.
    pub prefix: String,
    /// How long a claim's lease lasts unless renewed (P12).
    pub lease: Duration,
    /// How long a patient claimant waits for another machine's claim.
    pub claim_timeout: Duration,
}

impl RemoteConfig {
    /// The URL with any password replaced by `***`: what messages and
    /// reports show.
    pub fn url_for_display(&self) -> String {
        crate::link::without_password(&self.url)
    }

    /// The defaults, for `url` and `keys`.
    pub fn new(url: impl Into<String>, keys: Keys) -> Self {
        Self {
            url: url.into(),
            ca_file: None,
            keys,
            timeout: Duration::from_millis(500),
            retry_after: Duration::from_secs(5),
            ttl: Duration::from_secs(7 * 86_400),
            max_entry_bytes: 64 << 20,
            read_only: false,
            prefix: "kiln:".to_owned(),
            lease: DEFAULT_LEASE,
            claim_timeout: DEFAULT_CLAIM_TIMEOUT,
        }
    }

    /// The settings of the environment, or `None` when `KILN_REMOTE_URL`
    /// is not set (no remote tier).
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read, or no key configured
    /// ([`Error::NoKey`]).
    pub fn from_env() -> Result<Option<Self>> {
        Self::with_overrides(|name| std::env::var(name).ok())
    }

    /// As [`from_env`](Self::from_env), with `url` (when given) in place of
    /// `KILN_REMOTE_URL`: a command's `--remote URL`, or a program's choice,
    /// with every other setting and the keys from the environment.
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn from_env_with_url(url: Option<&str>) -> Result<Option<Self>> {
        Self::with_overrides(|name| match url {
            Some(url) if name == "KILN_REMOTE_URL" => Some(url.to_owned()),
            _ => std::env::var(name).ok(),
        })
    }

    /// As [`from_env`](Self::from_env), with the variables `lookup` gives.
    ///
    /// ```
    /// use kiln_remote::{RemoteConfig, keygen};
    ///
    /// let secret = keygen::fleet_key()?.secret_text();
    /// let config = RemoteConfig::with_overrides(|name| match name {
    ///     "KILN_REMOTE_URL" => Some("redis://127.0.0.1:6379".to_owned()),
    ///     "KILN_REMOTE_KEY" => Some(secret.clone()),
    ///     "KILN_REMOTE_TIMEOUT" => Some("0.25".to_owned()),
    ///     _ => None,
    /// })?
    /// .expect("a URL is set");
    /// assert_eq!(config.timeout, std::time::Duration::from_millis(250));
    /// # Ok::<(), kiln_remote::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn with_overrides(lookup: impl Fn(&'static str) -> Option<String>) -> Result<Option<Self>> {
        let set = |name: &'static str| lookup(name).filter(|value| !value.trim().is_empty());
        let Some(url) = set("KILN_REMOTE_URL") else {
            return Ok(None);
        };
        let keys = Keys::with_overrides(&lookup)?;
        let mut config = Self::new(url.trim(), keys);
        let seconds =
            |variable: &'static str, expected: &'static str| -> Result<Option<Duration>> {
                set(variable)
                    .map(|value| {
                        parse_seconds(&value).ok_or(Error::Setting {
                            variable,
                            value,
                            expected,
                        })
                    })
                    .transpose()
            };
        if let Some(timeout) = seconds(
            "KILN_REMOTE_TIMEOUT",
            "a number of seconds above 0, at most 86400: 0.5, 2",
        )? {
            config.timeout = timeout;
        }
        if let Some(retry) = seconds(
            "KILN_REMOTE_RETRY_AFTER",
            "a number of seconds above 0, at most 86400",
        )? {
            config.retry_after = retry;
        }
        if let Some(value) = set("KILN_REMOTE_TTL") {
            config.ttl = value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|seconds| *seconds > 0)
                .map(Duration::from_secs)
                .ok_or(Error::Setting {
                    variable: "KILN_REMOTE_TTL",
                    value,
                    expected: "a whole number of seconds above 0",
                })?;
        }
        if let Some(value) = set("KILN_REMOTE_MAX_ENTRY") {
            config.max_entry_bytes = kiln_store::parse_size(&value)
                .filter(|bytes| *bytes > 0)
                .ok_or(Error::Setting {
                    variable: "KILN_REMOTE_MAX_ENTRY",
                    value,
                    expected: "a size in bytes, with an optional suffix: 512M, 1G",
                })?;
        }
        if let Some(value) = set("KILN_REMOTE_READ_ONLY") {
            config.read_only = match value.trim() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                _ => {
                    return Err(Error::Setting {
                        variable: "KILN_REMOTE_READ_ONLY",
                        value,
                        expected: "1 to only read the remote, 0 to write it too",
                    });
                }
            };
        }
        if let Some(prefix) = set("KILN_REMOTE_PREFIX") {
            config.prefix = prefix.trim().to_owned();
        }
        if let Some(ca) = set("KILN_REMOTE_CA") {
            config.ca_file = Some(PathBuf::from(ca.trim()));
        }
        Ok(Some(config))
    }

    /// Whether this node writes: not read-only, and holding a key that
    /// signs.
    pub fn writes(&self) -> bool {
        !self.read_only && self.keys.can_write()
    }
}

/// A duration from a number of seconds above zero and at most a day.
fn parse_seconds(text: &str) -> Option<Duration> {
    let seconds: f64 = text.trim().parse().ok()?;
    (seconds.is_finite() && seconds > 0.0 && seconds <= MOST.as_secs_f64())
        .then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygen;

    #[test]
    fn no_url_is_no_remote_and_bad_settings_are_named() {
        assert!(RemoteConfig::with_overrides(|_| None).unwrap().is_none());
        let secret = keygen::fleet_key().unwrap().secret_text();
        for (variable, value) in [
            ("KILN_REMOTE_TIMEOUT", "0"),
            ("KILN_REMOTE_TIMEOUT", "soon"),
            ("KILN_REMOTE_TTL", "-1"),
            ("KILN_REMOTE_MAX_ENTRY", "big"),
            ("KILN_REMOTE_READ_ONLY", "maybe"),
        ] {
            let error = RemoteConfig::with_overrides(|name| match name {
                "KILN_REMOTE_URL" => Some("redis://127.0.0.1:1".into()),
                "KILN_REMOTE_KEY" => Some(secret.clone()),
                name if name == variable => Some(value.into()),
                _ => None,
            })
            .unwrap_err();
            assert!(error.to_string().contains(variable), "{error}");
        }
    }

    #[test]
    fn the_ca_file_is_read_with_the_url() {
        // P10: KILN_REMOTE_CA names the CA certificates of a rediss:// server.
        let secret = keygen::fleet_key().unwrap().secret_text();
        let config = RemoteConfig::with_overrides(|name| match name {
            "KILN_REMOTE_URL" => Some("rediss://127.0.0.1:6380".into()),
            "KILN_REMOTE_KEY" => Some(secret.clone()),
            "KILN_REMOTE_CA" => Some(" ca.pem ".into()),
            _ => None,
        })
        .unwrap()
        .unwrap();
        assert_eq!(config.ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(RemoteConfig::new("rediss://h:1", config.keys).ca_file, None);
    }

    #[test]
    fn a_url_without_a_key_refuses_to_open() {
        // P10: no key configured, the remote tier does not start.
        let error = RemoteConfig::with_overrides(|name| {
            (name == "KILN_REMOTE_URL").then(|| "redis://127.0.0.1:1".into())
        })
        .unwrap_err();
        assert!(matches!(error, Error::NoKey));
    }
}
