//! The one reading of the store's settings, for a program and for the
//! `kiln` command alike: the disk store's `KILN_CACHE_*` variables, and the
//! fleet tier's `KILN_REMOTE_URL` and keys, opened into [`Tiers`].
//! [`Store::from_env`] is built on these; the `kiln` command calls them
//! itself, to report on each tier.

use std::path::Path;
use std::sync::Arc;

use kiln_engine::ArtifactStore;
use kiln_store::{DiskStore, StoreConfig};

use crate::{Store, StoreError};

/// The default store's tiers: the disk store, and the fleet tier behind it
/// when one is configured.
#[derive(Debug, Clone)]
pub struct Tiers {
    disk: DiskStore,
    #[cfg(feature = "remote")]
    fleet: Option<kiln_remote::TieredStore>,
    #[cfg(feature = "bucket")]
    bucket: Option<kiln_bucket::BucketTier>,
}

impl Tiers {
    /// The disk store.
    pub fn disk(&self) -> &DiskStore {
        &self.disk
    }

    /// The disk store with the fleet tier behind it, when there is one.
    #[cfg(feature = "remote")]
    pub fn fleet(&self) -> Option<&kiln_remote::TieredStore> {
        self.fleet.as_ref()
    }

    /// The bucket behind the disk store (and the fleet tier), when
    /// `KILN_REMOTE_URL` names one.
    #[cfg(feature = "bucket")]
    pub fn bucket(&self) -> Option<&kiln_bucket::BucketTier> {
        self.bucket.as_ref()
    }

    /// The store a target takes: the bucket behind the others when there
    /// is one, else the fleet tier over the disk store when there is one,
    /// else the disk store.
    pub fn shared(&self) -> Arc<dyn ArtifactStore> {
        #[cfg(feature = "bucket")]
        if let Some(bucket) = &self.bucket {
            return Arc::new(bucket.clone());
        }
        #[cfg(feature = "remote")]
        if let Some(fleet) = &self.fleet {
            return Arc::new(fleet.clone());
        }
        Arc::new(self.disk.clone())
    }
}

impl Store {
    /// The disk store's settings as the `KILN_CACHE_*` variables give them,
    /// in `dir` when one is given (a folder named on purpose is worked on
    /// even under `KILN_CACHE_DISABLE=1`, or where no cache folder is
    /// known); `None` when the store is disabled and no `dir` is given.
    ///
    /// # Errors
    ///
    /// A `KILN_CACHE_*` variable does not parse, or no `dir` is given and
    /// no folder can be found (no `KILN_CACHE_DIR`, `XDG_CACHE_HOME` or
    /// `HOME`).
    pub fn config_from_env(dir: Option<&Path>) -> Result<Option<StoreConfig>, kiln_store::Error> {
        match (StoreConfig::from_env(), dir) {
            (Ok(Some(config)), Some(dir)) => Ok(Some(StoreConfig {
                root: dir.to_path_buf(),
                ..config
            })),
            (Ok(None) | Err(kiln_store::Error::NoCacheFolder), Some(dir)) => {
                Ok(Some(StoreConfig::at(dir)))
            }
            (config, _) => config,
        }
    }

    /// The fleet tier `url` names, else `KILN_REMOTE_URL`, with the keys
    /// the `KILN_REMOTE_*` variables give; `None` when neither names one.
    ///
    /// # Errors
    ///
    /// A setting or a key cannot be read, or there is no key (`kiln
    /// keygen` makes one).
    #[cfg(feature = "remote")]
    pub fn fleet_from_env(
        url: Option<&str>,
    ) -> Result<Option<kiln_remote::RemoteStore>, StoreError> {
        kiln_remote::RemoteConfig::from_env_with_url(url)?
            .map(kiln_remote::RemoteStore::open)
            .transpose()
            .map_err(StoreError::from)
    }

    /// `disk`, with the fleet tier behind it that `remote_url` names, else
    /// `KILN_REMOTE_URL`, else none: the one place the tiers are put
    /// together.
    ///
    /// # Errors
    ///
    /// A fleet tier is named and its settings or keys cannot be read.
    pub fn tiers(disk: DiskStore, remote_url: Option<&str>) -> Result<Tiers, StoreError> {
        #[cfg(feature = "bucket")]
        if let Some(tiers) = Self::bucket_tiers(&disk, remote_url)? {
            return Ok(tiers);
        }
        #[cfg(feature = "remote")]
        {
            let fleet = Self::fleet_from_env(remote_url)?
                .map(|remote| kiln_remote::TieredStore::new(disk.clone(), remote));
            Ok(Tiers {
                disk,
                fleet,
                #[cfg(feature = "bucket")]
                bucket: None,
            })
        }
        #[cfg(not(feature = "remote"))]
        {
            // Built without the fleet tier: a remote named anyway is said
            // once, so that a fleet's setting is never ignored unseen.
            let variable = std::env::var(REMOTE_URL_VARIABLE).ok();
            if let Some(warning) = ignored_remote(remote_url, variable.as_deref()) {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    if log::max_level() == log::LevelFilter::Off {
                        eprintln!("kiln: warning: {warning}");
                    } else {
                        log::warn!("{warning}");
                    }
                });
            }
            Ok(Tiers { disk })
        }
    }

    /// The tiers when the remote URL (`remote_url`, else
    /// `KILN_REMOTE_URL`) names a bucket: `s3://BUCKET/PREFIX` alone, or
    /// after a Redis URL and a space (Redis in front, the bucket behind
    /// it, split by size: `KILN_BUCKET_SPLIT`); `None` when it names none.
    #[cfg(feature = "bucket")]
    fn bucket_tiers(
        disk: &DiskStore,
        remote_url: Option<&str>,
    ) -> Result<Option<Tiers>, StoreError> {
        use kiln_bucket::config::is_bucket_url;
        let url = remote_url
            .map(str::to_owned)
            .or_else(|| std::env::var("KILN_REMOTE_URL").ok())
            .unwrap_or_default();
        let Some(bucket_url) = url.split_whitespace().find(|part| is_bucket_url(part)) else {
            return Ok(None);
        };
        let Some(config) = kiln_bucket::BucketConfig::from_env_with_url(Some(bucket_url))? else {
            return Ok(None);
        };
        // The size split (`KILN_BUCKET_SPLIT`): small artifacts in Redis,
        // large ones in the bucket.
        let split = config.split_bytes;
        let fleet = match url.split_whitespace().find(|part| !is_bucket_url(part)) {
            Some(redis_url) => Self::fleet_from_env(Some(redis_url))?
                .map(|remote| kiln_remote::TieredStore::with_split(disk.clone(), remote, split)),
            None => None,
        };
        let bucket = kiln_bucket::BucketStore::open(config)?;
        let bucket = match &fleet {
            Some(fleet) => {
                kiln_bucket::BucketTier::with_split(Arc::new(fleet.clone()), bucket, split)
            }
            None => kiln_bucket::BucketTier::new(Arc::new(disk.clone()), bucket),
        };
        Ok(Some(Tiers {
            disk: disk.clone(),
            fleet,
            bucket: Some(bucket),
        }))
    }
}

/// The variable that names the fleet tier (kiln-remote reads it when the
/// `remote` feature is on).
#[cfg(any(test, not(feature = "remote")))]
const REMOTE_URL_VARIABLE: &str = "KILN_REMOTE_URL";

/// What a program built without the `remote` feature says when a remote
/// tier is named (`url`, else the variable's `variable`): nothing when
/// none is.
#[cfg(any(test, not(feature = "remote")))]
fn ignored_remote(url: Option<&str>, variable: Option<&str>) -> Option<String> {
    let source = match (url.map(str::trim), variable.map(str::trim)) {
        (Some(url), _) if !url.is_empty() => "the remote URL given",
        (None, Some(variable)) if !variable.is_empty() => REMOTE_URL_VARIABLE,
        _ => return None,
    };
    Some(format!(
        "{source} names a remote tier, but this program was built without kiln's `remote` \
         feature: it uses the disk store alone (turn the feature on in its kiln dependency to \
         share a fleet's store)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_named_without_the_feature_is_said_and_none_is_silent() {
        let said = ignored_remote(None, Some("redis://fleet:6379")).expect("a warning");
        assert!(
            said.starts_with("KILN_REMOTE_URL names a remote tier"),
            "{said}"
        );
        assert!(said.contains("`remote` feature"), "{said}");
        assert!(
            !said.contains("fleet:6379"),
            "no URL, which may hold a password: {said}"
        );
        assert!(ignored_remote(Some("redis://other:6379"), None).is_some());
        assert_eq!(ignored_remote(None, None), None);
        assert_eq!(ignored_remote(None, Some("  ")), None);
    }
}
