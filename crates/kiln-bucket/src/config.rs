//! Where the bucket is and how the tier behaves: `KILN_REMOTE_URL` set to
//! `s3://BUCKET/PREFIX`, the remote tier's keys and timing variables, and
//! the usual AWS variables for the endpoint, region and credentials.
//!
//! | variable | setting | default |
//! | --- | --- | --- |
//! | `KILN_REMOTE_URL` | `s3://BUCKET[/PREFIX]`: [`BucketConfig::bucket`], [`BucketConfig::prefix`] | none: no bucket tier |
//! | `KILN_REMOTE_KEY`, `KILN_REMOTE_SIGNING_KEY`, `KILN_REMOTE_TRUSTED_KEYS` | [`BucketConfig::keys`] | none: the tier refuses to open |
//! | `KILN_REMOTE_TIMEOUT` | [`BucketConfig::timeout`] | 2 seconds |
//! | `KILN_REMOTE_RETRY_AFTER` | [`BucketConfig::retry_after`] | 5 seconds |
//! | `KILN_REMOTE_MAX_ENTRY` | [`BucketConfig::max_entry_bytes`] | 64 MiB |
//! | `KILN_REMOTE_READ_ONLY=1` | [`BucketConfig::read_only`] | writes when a key can sign |
//! | `KILN_BUCKET_CONCURRENCY` | [`BucketConfig::concurrency`] | 64 requests at once |
//! | `KILN_BUCKET_SPLIT` | [`BucketConfig::split_bytes`] | 256 KiB; `0`, `1M`, `4MiB` |
//! | `KILN_BUCKET_PACKS` | [`BucketConfig::packs`] | `beside`; `first`, `off` |
//! | `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` | [`BucketConfig::endpoint`] | AWS S3 in the region |
//! | `AWS_REGION`, else `AWS_DEFAULT_REGION` | [`BucketConfig::region`] | `us-east-1` |
//! | `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` | [`BucketConfig::credentials`] | none: unsigned requests (a public bucket, read only) |

use std::time::Duration;

use kiln_remote::{Keys, RemoteConfig};
use url::Url;

use crate::error::{Error, Result};

/// How long one call (a batch's lookups, a put) may take unless
/// `KILN_REMOTE_TIMEOUT` says otherwise: an object store's round trip is
/// tens of milliseconds, and a large artifact takes several.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// How many requests a call sends at once unless `KILN_BUCKET_CONCURRENCY`
/// says otherwise: a batch of 64 kernels' lookups in one round trip.
pub const DEFAULT_CONCURRENCY: usize = 64;

/// The size split unless `KILN_BUCKET_SPLIT` says otherwise: with Redis in
/// front, artifacts of at most this many bytes go to Redis, larger ones to
/// the bucket.
pub const DEFAULT_SPLIT: u64 = 256 << 10;

/// How a batch's lookup reads the batch's pack (one object holding the
/// entries of a batch's first lookup, written when the batch ends) and the
/// per-key objects: `KILN_BUCKET_PACKS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PackOrder {
    /// The pack's GET beside the per-key GETs, answering once the pack
    /// covered every key or every GET answered: the per-key GETs go in
    /// waves from a 60 ms head start until the pack answers (all at once
    /// when it answered without them), so a cold batch costs no round
    /// trip more, and a warm one the few per-key GETs sent before its
    /// pack's answer, not waited for (`beside`).
    #[default]
    Beside,
    /// The pack's GET first, then per-key GETs for what it lacks: a warm
    /// batch is one request, a cold one a round trip more (`first`).
    First,
    /// No packs: neither read nor written (`off`).
    Off,
}

/// An access key for signed requests (AWS signature version 4). Its
/// `Debug` shows only the key's id.
#[derive(Clone)]
pub struct Credentials {
    /// `AWS_ACCESS_KEY_ID`.
    pub key_id: String,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret: String,
    /// `AWS_SESSION_TOKEN`, for temporary credentials.
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <secret>)", self.key_id)
    }
}

/// Everything a [`BucketStore`](crate::BucketStore) needs.
#[derive(Debug, Clone)]
pub struct BucketConfig {
    /// The bucket's name.
    pub bucket: String,
    /// What every object name starts with (`kiln/` for
    /// `s3://bucket/kiln`), so one bucket can serve several fleets.
    pub prefix: String,
    /// The S3 endpoint: `https://s3.REGION.amazonaws.com` unless set, with
    /// virtual-host addressing; an endpoint set is addressed by path, as
    /// S3-compatible servers expect.
    pub endpoint: Url,
    /// Whether the endpoint was named (path-style addressing) rather than
    /// AWS's own (virtual-host addressing).
    pub endpoint_named: bool,
    /// The region requests are signed for.
    pub region: String,
    /// The access key; `None` sends unsigned requests.
    pub credentials: Option<Credentials>,
    /// What signs and verifies entries (P10): the remote tier's keys.
    pub keys: Keys,
    /// The longest one call may take, all of its requests together.
    pub timeout: Duration,
    /// How long the bucket is left alone after a failed call before it is
    /// asked again (doubling while it keeps failing, up to a minute).
    pub retry_after: Duration,
    /// The largest entry written or read.
    pub max_entry_bytes: u64,
    /// Reads only: writes nothing, removes nothing.
    pub read_only: bool,
    /// How many requests one call sends at once.
    pub concurrency: usize,
    /// The size split, when Redis is in front of the bucket (both in
    /// `KILN_REMOTE_URL`): artifacts of at most this many bytes go to
    /// Redis alone, larger ones to the bucket alone; `0` sends every
    /// artifact to the bucket (Redis keeps the claims). Lookups that Redis
    /// misses ask the bucket, since an entry's size is not known before it
    /// is read. Without Redis the bucket takes every artifact.
    pub split_bytes: u64,
    /// How a batch's pack is read beside its per-key objects, or whether
    /// packs are used at all. Packs are written only where the bucket
    /// takes every artifact (no size split).
    pub packs: PackOrder,
}

/// Whether `url` names a bucket (`s3://...`).
pub fn is_bucket_url(url: &str) -> bool {
    url.trim().starts_with("s3://")
}

impl BucketConfig {
    /// The settings of the environment, or `None` when `KILN_REMOTE_URL`
    /// does not name a bucket.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read, an address that cannot
    /// be understood, or no key configured.
    pub fn from_env() -> Result<Option<Self>> {
        Self::with_overrides(|name| std::env::var(name).ok())
    }

    /// As [`from_env`](Self::from_env), with `url` (when given) in place of
    /// `KILN_REMOTE_URL`.
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
    /// use kiln_bucket::BucketConfig;
    /// use kiln_remote::keygen;
    ///
    /// let secret = keygen::fleet_key()?.secret_text();
    /// let config = BucketConfig::with_overrides(|name| match name {
    ///     "KILN_REMOTE_URL" => Some("s3://builds/kiln".to_owned()),
    ///     "KILN_REMOTE_KEY" => Some(secret.clone()),
    ///     "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:3900".to_owned()),
    ///     "AWS_REGION" => Some("garage".to_owned()),
    ///     _ => None,
    /// })?
    /// .expect("the URL names a bucket");
    /// assert_eq!((config.bucket.as_str(), config.prefix.as_str()), ("builds", "kiln/"));
    /// # Ok::<(), kiln_bucket::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn with_overrides(lookup: impl Fn(&'static str) -> Option<String>) -> Result<Option<Self>> {
        let set = |name: &'static str| lookup(name).filter(|value| !value.trim().is_empty());
        let Some(address) = set("KILN_REMOTE_URL").filter(|url| is_bucket_url(url)) else {
            return Ok(None);
        };
        let Some(remote) = RemoteConfig::with_overrides(&lookup)? else {
            return Ok(None);
        };
        let (bucket, prefix) = parse_address(address.trim())?;
        let region = set("AWS_REGION")
            .or_else(|| set("AWS_DEFAULT_REGION"))
            .map_or_else(|| "us-east-1".to_owned(), |region| region.trim().to_owned());
        let named = set("AWS_ENDPOINT_URL_S3").or_else(|| set("AWS_ENDPOINT_URL"));
        let endpoint_text = named
            .clone()
            .unwrap_or_else(|| format!("https://s3.{region}.amazonaws.com"));
        let endpoint = Url::parse(endpoint_text.trim()).map_err(|error| Error::Address {
            address: endpoint_text.clone(),
            problem: format!("not an endpoint URL ({error})"),
        })?;
        let credentials = match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
            (Some(key_id), Some(secret)) => Some(Credentials {
                key_id: key_id.trim().to_owned(),
                secret: secret.trim().to_owned(),
                token: set("AWS_SESSION_TOKEN").map(|token| token.trim().to_owned()),
            }),
            _ => None,
        };
        let timeout = if set("KILN_REMOTE_TIMEOUT").is_some() {
            remote.timeout
        } else {
            DEFAULT_TIMEOUT
        };
        let concurrency = match set("KILN_BUCKET_CONCURRENCY") {
            None => DEFAULT_CONCURRENCY,
            Some(value) => value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|count| (1..=256).contains(count))
                .ok_or(Error::Setting {
                    variable: "KILN_BUCKET_CONCURRENCY",
                    value,
                    expected: "a whole number of requests from 1 to 256",
                })?,
        };
        let split_bytes = match set("KILN_BUCKET_SPLIT") {
            None => DEFAULT_SPLIT,
            Some(value) => kiln_store::parse_size(&value).ok_or(Error::Setting {
                variable: "KILN_BUCKET_SPLIT",
                value,
                expected: "a size in bytes, as 256K, 1M or 0",
            })?,
        };
        let packs = match set("KILN_BUCKET_PACKS").as_deref().map(str::trim) {
            None | Some("beside") => PackOrder::Beside,
            Some("first") => PackOrder::First,
            Some("off" | "0") => PackOrder::Off,
            Some(other) => {
                return Err(Error::Setting {
                    variable: "KILN_BUCKET_PACKS",
                    value: other.to_owned(),
                    expected: "beside, first or off",
                });
            }
        };
        Ok(Some(Self {
            bucket,
            prefix,
            endpoint,
            endpoint_named: named.is_some(),
            region,
            credentials,
            keys: remote.keys,
            timeout,
            retry_after: remote.retry_after,
            max_entry_bytes: remote.max_entry_bytes,
            read_only: remote.read_only,
            concurrency,
            split_bytes,
            packs,
        }))
    }

    /// The defaults, for a bucket on `endpoint` (path-style addressing)
    /// and `keys`: what tests and programs that configure in code start
    /// from.
    pub fn new(endpoint: Url, bucket: impl Into<String>, keys: Keys) -> Self {
        Self {
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint,
            endpoint_named: true,
            region: "us-east-1".to_owned(),
            credentials: None,
            keys,
            timeout: DEFAULT_TIMEOUT,
            retry_after: Duration::from_secs(5),
            max_entry_bytes: 64 << 20,
            read_only: false,
            concurrency: DEFAULT_CONCURRENCY,
            split_bytes: DEFAULT_SPLIT,
            packs: PackOrder::default(),
        }
    }

    /// `s3://BUCKET/PREFIX`, as messages show the bucket.
    pub fn address(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// Whether this node writes: not read-only, and holding a key that
    /// signs.
    pub fn writes(&self) -> bool {
        !self.read_only && self.keys.can_write()
    }
}

/// The bucket and the object prefix (empty, or ending in `/`) of
/// `s3://BUCKET[/PREFIX]`.
fn parse_address(address: &str) -> Result<(String, String)> {
    let refuse = |problem: &str| Error::Address {
        address: address.to_owned(),
        problem: problem.to_owned(),
    };
    let rest = address
        .strip_prefix("s3://")
        .ok_or_else(|| refuse("it does not start with s3://"))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let is_name_character = |character: char| {
        character.is_ascii_lowercase() || character.is_ascii_digit() || "-.".contains(character)
    };
    if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(is_name_character) {
        return Err(refuse(
            "a bucket name is 3 to 63 lower-case letters, digits, dots and hyphens",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if prefix.contains("//") || prefix.split('/').any(|part| part == "." || part == "..") {
        return Err(refuse("the prefix holds an empty, `.` or `..` part"));
    }
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    Ok((bucket.to_owned(), prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(variables: &[(&'static str, &str)]) -> Result<Option<BucketConfig>> {
        let secret = kiln_remote::keygen::fleet_key().unwrap().secret_text();
        BucketConfig::with_overrides(|name| {
            if name == "KILN_REMOTE_KEY" {
                return Some(secret.clone());
            }
            variables
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn a_redis_url_or_none_is_no_bucket() {
        assert!(with(&[]).unwrap().is_none());
        assert!(
            with(&[("KILN_REMOTE_URL", "redis://127.0.0.1:6379")])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn an_s3_url_names_the_bucket_prefix_and_aws_endpoint() {
        let config = with(&[("KILN_REMOTE_URL", "s3://fleet-cache/kiln/v1/")])
            .unwrap()
            .unwrap();
        assert_eq!(config.bucket, "fleet-cache");
        assert_eq!(config.prefix, "kiln/v1/");
        assert_eq!(
            config.endpoint.as_str(),
            "https://s3.us-east-1.amazonaws.com/"
        );
        assert!(!config.endpoint_named);
        assert!(config.credentials.is_none());
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
        let named = with(&[
            ("KILN_REMOTE_URL", "s3://fleet-cache"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:3900"),
            ("AWS_REGION", "garage"),
            ("AWS_ACCESS_KEY_ID", "GK1"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("KILN_REMOTE_TIMEOUT", "0.25"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(named.prefix, "");
        assert!(named.endpoint_named);
        assert_eq!(named.region, "garage");
        assert_eq!(named.timeout, Duration::from_millis(250));
        let credentials = named.credentials.unwrap();
        assert!(
            !format!("{credentials:?}").contains("s3cr3t"),
            "the secret is never shown"
        );
    }

    #[test]
    fn the_size_split_reads_the_disk_stores_size_syntax() {
        let split = |value: Option<&str>| {
            let mut settings = vec![("KILN_REMOTE_URL", "s3://fleet-cache")];
            settings.extend(value.map(|value| ("KILN_BUCKET_SPLIT", value)));
            with(&settings).map(|config| config.unwrap().split_bytes)
        };
        assert_eq!(split(None).unwrap(), DEFAULT_SPLIT);
        assert_eq!(split(Some("1M")).unwrap(), 1 << 20);
        assert_eq!(split(Some("0")).unwrap(), 0);
        let error = split(Some("half")).unwrap_err();
        assert!(error.to_string().contains("KILN_BUCKET_SPLIT"), "{error}");
    }

    #[test]
    fn p16_the_pack_order_is_beside_unless_set() {
        let order = |value: Option<&str>| {
            let mut settings = vec![("KILN_REMOTE_URL", "s3://fleet-cache")];
            settings.extend(value.map(|value| ("KILN_BUCKET_PACKS", value)));
            with(&settings).map(|config| config.unwrap().packs)
        };
        assert_eq!(order(None).unwrap(), PackOrder::Beside);
        assert_eq!(order(Some("first")).unwrap(), PackOrder::First);
        assert_eq!(order(Some(" off ")).unwrap(), PackOrder::Off);
        let error = order(Some("sometimes")).unwrap_err();
        assert!(error.to_string().contains("KILN_BUCKET_PACKS"), "{error}");
    }

    #[test]
    fn bad_addresses_and_settings_are_named() {
        for address in [
            "s3://",
            "s3://A_B",
            "s3://ok-name/../x",
            "s3://ok-name/a//b",
        ] {
            let error = with(&[("KILN_REMOTE_URL", address)]).unwrap_err();
            assert!(error.to_string().contains(address), "{error}");
        }
        let error = with(&[
            ("KILN_REMOTE_URL", "s3://fleet-cache"),
            ("KILN_BUCKET_CONCURRENCY", "0"),
        ])
        .unwrap_err();
        assert!(error.to_string().contains("KILN_BUCKET_CONCURRENCY"));
    }

    #[test]
    fn a_bucket_without_a_key_refuses_to_open() {
        // P10, P16: no key configured, the tier does not start.
        let error = BucketConfig::with_overrides(|name| {
            (name == "KILN_REMOTE_URL").then(|| "s3://fleet-cache".to_owned())
        })
        .unwrap_err();
        assert!(matches!(error, Error::Remote(kiln_remote::Error::NoKey)));
    }
}
