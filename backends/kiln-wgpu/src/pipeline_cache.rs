//! The driver's pipeline cache, kept in the store (B3).
//!
//! A Vulkan driver compiles SPIR-V to machine code when a pipeline is made;
//! a pipeline cache holds that machine code, so a pipeline made again from
//! the same SPIR-V skips the driver's compiler. The cache is one blob per
//! adapter and driver: it is read from the store when a target binds to one,
//! every pipeline is made through it, and it is written back after each
//! batch that made a pipeline.
//!
//! # The key
//!
//! The blob is no kernel's artifact: it is kept as a named blob of the store
//! ([`Blobs::put_blob`](kiln_engine::store::Blobs::put_blob)), of kind
//! [`PIPELINE_CACHE_KIND`], under a [`BlobKey`] made of everything that
//! decides whether the driver can use it: the wgpu version (wgpu wraps the
//! driver's data in a header of its own), the adapter's vendor and device
//! ids and name, the driver's name and version text, and the driver's
//! numeric version and `pipelineCacheUUID` (read with ash, as wgpu keeps
//! them to itself). A driver update is another key, so an old blob is never
//! offered to a new driver; it ages out of the store. `kiln ls` lists it
//! as what it is.
//!
//! # Bad data
//!
//! wgpu checks its header (magic, adapter, driver version, length) before
//! the driver sees the blob. Data wgpu refuses, and data it takes but the
//! driver errors on, fall back to an empty cache, with the reason kept in
//! [`PipelineCacheState::Rejected`]; pipelines are then compiled afresh
//! and the next save replaces the blob.
//!
//! # Several processes
//!
//! Each process reads the blob once and writes its own back whole; the last
//! writer wins. Vulkan can merge caches, wgpu cannot, so a blob holds what
//! one process made on top of what it read.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_engine::store::{ArtifactStore, BlobKey};
use kiln_engine::{Lookup, StoreOutcome};

use crate::device::WgpuDevice;
use crate::key::WGPU_VERSION;

/// The kind of blob a pipeline cache is kept as.
pub const PIPELINE_CACHE_KIND: &str = "wgpu pipeline cache";

/// How a target's pipeline cache started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineCacheState {
    /// The device has no pipeline cache (not Vulkan, or opened without
    /// [`wgpu::Features::PIPELINE_CACHE`]), or the target has no store.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The store held nothing for this adapter and driver: an empty cache.
    Empty,
    /// The store's blob was given to the driver.
    Loaded {
        /// Its size.
        bytes: u64,
    },
    /// The store's blob was refused; the cache started empty.
    Rejected {
        /// Why the blob was refused.
        reason: String,
    },
}

impl fmt::Display for PipelineCacheState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable { reason } => write!(f, "unavailable: {reason}"),
            Self::Empty => f.write_str("started empty: the store held none for this driver"),
            Self::Loaded { bytes } => write!(f, "{bytes} bytes read from the store"),
            Self::Rejected { reason } => {
                write!(f, "the stored one was refused ({reason}); started empty")
            }
        }
    }
}

/// The key of `device`'s pipeline cache in a store, or `None` when it has
/// none.
pub fn pipeline_cache_key(device: &WgpuDevice) -> Option<BlobKey> {
    if !device.has_pipeline_cache() {
        return None;
    }
    let info = device.info();
    let mut key = BlobKey::new(PIPELINE_CACHE_KIND)
        .component("wgpu", WGPU_VERSION)
        .component(
            "adapter",
            format!(
                "{} [{:04x}:{:04x}] {:?}",
                info.name, info.vendor, info.device, info.backend
            ),
        )
        .component("driver", format!("{} {}", info.driver, info.driver_info));
    if let Some(identity) = device.driver_identity() {
        key = key
            .component("driver version", format!("{:#x}", identity.driver_version))
            .component(
                "cache uuid",
                kiln_engine::store::hex(&identity.pipeline_cache_uuid),
            );
    }
    Some(key)
}

/// A pipeline cache made on `device`, from `data` when given (a mismatch
/// is then an error, not an empty cache), with the error the device
/// raised making it.
///
/// # Safety
///
/// `data`, when given, must be what `get_data` of a pipeline cache on an
/// adapter and driver like `device`'s returned: wgpu hands it to the
/// driver, which trusts it past wgpu's own header check.
unsafe fn make_cache(
    device: &WgpuDevice,
    data: Option<&[u8]>,
) -> (wgpu::PipelineCache, Option<wgpu::Error>) {
    device.capture(|| {
        // SAFETY: the caller vouches for `data` (above); `None` gives the
        // driver nothing to trust.
        unsafe {
            device
                .device()
                .create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                    label: Some("kiln pipeline cache"),
                    data,
                    fallback: data.is_none(),
                })
        }
    })
}

/// A pipeline cache read from a store, written back to it.
pub(crate) struct PersistedPipelineCache {
    cache: wgpu::PipelineCache,
    store: Arc<dyn ArtifactStore>,
    key: BlobKey,
    state: PipelineCacheState,
    /// Pipelines made through the cache since it was last saved.
    unsaved: usize,
    /// Time spent making pipelines through it since it was last saved.
    work: Duration,
}

impl PersistedPipelineCache {
    /// The cache of `device` read from `store`; `Err` says why there is
    /// none.
    pub(crate) fn open(
        device: &WgpuDevice,
        store: Arc<dyn ArtifactStore>,
    ) -> Result<Self, PipelineCacheState> {
        let Some(key) = pipeline_cache_key(device) else {
            return Err(PipelineCacheState::Unavailable {
                reason: format!(
                    "the adapter `{}` ({:?}) has no Features::PIPELINE_CACHE, or the device was \
                     opened without it",
                    device.info().name,
                    device.info().backend
                ),
            });
        };
        let (data, mut state) = match store.parts().lookup_blob(&key) {
            Lookup::Hit { artifact, .. } => {
                let bytes = artifact.len() as u64;
                (Some(artifact), PipelineCacheState::Loaded { bytes })
            }
            Lookup::Miss(kiln_engine::Miss::Absent) => (None, PipelineCacheState::Empty),
            Lookup::Miss(miss) => (
                None,
                PipelineCacheState::Rejected {
                    reason: format!("the store's entry: {miss}"),
                },
            ),
        };
        let mut cache = None;
        if let Some(data) = &data {
            // SAFETY: the bytes are what `get_data` of a cache on an
            // adapter with this very key returned: the key holds the
            // adapter, driver and wgpu version, and the store verified the
            // bytes' digest (P2). wgpu checks its own header again and
            // `fallback: false` makes any mismatch an error here.
            let (made, error) = unsafe { make_cache(device, Some(data)) };
            match error {
                None => cache = Some(made),
                Some(error) => {
                    log::warn!("the stored pipeline cache was refused: {error}; starting empty");
                    state = PipelineCacheState::Rejected {
                        reason: error.to_string(),
                    };
                }
            }
        }
        let cache = match cache {
            Some(cache) => cache,
            None => {
                // SAFETY: no initial data: nothing for the driver to trust.
                let (made, error) = unsafe { make_cache(device, None) };
                if let Some(error) = error {
                    return Err(PipelineCacheState::Unavailable {
                        reason: format!("the device made no pipeline cache: {error}"),
                    });
                }
                made
            }
        };
        Ok(Self {
            cache,
            store,
            key,
            state,
            unsaved: 0,
            work: Duration::ZERO,
        })
    }

    /// The cache, to make pipelines through.
    pub(crate) fn cache(&self) -> &wgpu::PipelineCache {
        &self.cache
    }

    /// How the cache started.
    pub(crate) fn state(&self) -> &PipelineCacheState {
        &self.state
    }

    /// Counts a pipeline made through the cache in `took`.
    pub(crate) fn made_pipeline(&mut self, took: Duration) {
        self.unsaved += 1;
        self.work += took;
    }

    /// Writes the cache to the store when pipelines were made since the last
    /// save; [`StoreOutcome::Skipped`] when none were.
    pub(crate) fn save(&mut self) -> StoreOutcome {
        if self.unsaved == 0 {
            return StoreOutcome::Skipped;
        }
        let started = Instant::now();
        let Some(data) = self.cache.get_data() else {
            return StoreOutcome::Failed {
                detail: "the driver returned no pipeline cache data".into(),
            };
        };
        if data.is_empty() {
            return StoreOutcome::Skipped;
        }
        // Its entry's files made durable together: one sync of the store's
        // file system rather than one per file and folder (P3), just after
        // the batch's own, which left little to flush.
        let parts = self.store.parts();
        parts.begin_group();
        let outcome = parts.put_blob(&self.key, &data);
        parts.commit_group();
        match &outcome {
            StoreOutcome::Stored { bytes } => {
                log::debug!(
                    "stored a pipeline cache of {} bytes ({bytes} written) in {:?}, after {} \
                     new pipelines made in {:?}",
                    data.len(),
                    started.elapsed(),
                    self.unsaved,
                    self.work
                );
                self.unsaved = 0;
                self.work = Duration::ZERO;
            }
            StoreOutcome::Failed { detail } => {
                // The store says why its writes fail, once per cause (P5):
                // a second warning of the same cause would bury it.
                log::debug!("the pipeline cache was not stored: {detail}");
            }
            StoreOutcome::Skipped => {}
        }
        outcome
    }
}

impl fmt::Debug for PersistedPipelineCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistedPipelineCache")
            .field("key", &self.key)
            .field("state", &self.state)
            .field("unsaved", &self.unsaved)
            .finish_non_exhaustive()
    }
}
