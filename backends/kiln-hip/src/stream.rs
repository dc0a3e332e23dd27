//! Streams: the queue of one device that a launch goes on (B5).
//!
//! kiln launches on no stream the program did not name: a
//! [`LoadedKernel::launch`](crate::LoadedKernel::launch) takes a
//! [`HipStream`], as kiln-cuda's takes a cudarc stream. A stream is one of
//! three:
//!
//! - a stream of kiln's own ([`HipDevice::new_stream`]), non-blocking like
//!   the streams HIP programs and cudarc make, destroyed with its last
//!   clone;
//! - the device's default stream ([`HipDevice::default_stream`]), which
//!   orders against every blocking stream;
//! - a stream the program already has ([`HipStream::from_raw`]), which
//!   kiln uses and never destroys.
//!
//! **None of this has run on AMD hardware** (see the crate's status).

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use crate::device::HipDevice;
use crate::error::Result;
use crate::result;
use crate::sys;

/// A stream of one device. Cloning shares it.
#[derive(Clone)]
pub struct HipStream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    device: HipDevice,
    raw: sys::hipStream_t,
    /// Whether kiln made the stream, and so destroys it.
    is_owned: bool,
}

// SAFETY: a stream handle names a process-wide runtime object; the HIP
// runtime accepts it from any thread.
unsafe impl Send for StreamInner {}
// SAFETY: as for `Send`: the handle is only passed to the runtime, never
// dereferenced here.
unsafe impl Sync for StreamInner {}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if !self.is_owned {
            return;
        }
        // SAFETY: kiln made the stream (`HipDevice::new_stream`), and this
        // is its last clone; the runtime destroys it once its work is done.
        if let Err(error) = unsafe { result::stream_destroy(self.device.runtime(), self.raw) } {
            log::warn!("could not destroy a HIP stream: {error}");
        }
    }
}

// The streams of a device are made here, where a stream is: the device
// knows nothing of streams.
impl HipDevice {
    /// A new stream on the device, non-blocking (it does not wait for the
    /// default stream, as the streams HIP programs make do not), destroyed
    /// with its last clone. Launches take a stream; see [`HipStream`].
    ///
    /// # Errors
    ///
    /// The runtime's status.
    pub fn new_stream(&self) -> Result<HipStream> {
        HipStream::create(self)
    }

    /// The device's default stream, which orders against every blocking
    /// stream of the device.
    pub fn default_stream(&self) -> HipStream {
        HipStream::default_of(self)
    }
}

impl HipStream {
    /// A new non-blocking stream on `device`.
    pub(crate) fn create(device: &HipDevice) -> Result<Self> {
        device.make_current()?;
        let raw = result::stream_create(device.runtime())?;
        Ok(Self::made(device.clone(), raw, true))
    }

    /// The default stream of `device`.
    pub(crate) fn default_of(device: &HipDevice) -> Self {
        Self::made(device.clone(), std::ptr::null_mut(), false)
    }

    /// A stream the program made on `device` (with `hipStreamCreate` or
    /// another binding of the HIP runtime), for kiln's launches to go on.
    /// kiln never destroys it.
    ///
    /// # Safety
    ///
    /// `raw` is a live stream of `device` (or null, its default stream), and
    /// stays live while this value or a clone of it does.
    pub unsafe fn from_raw(device: &HipDevice, raw: *mut c_void) -> Self {
        Self::made(device.clone(), raw, false)
    }

    fn made(device: HipDevice, raw: sys::hipStream_t, is_owned: bool) -> Self {
        Self {
            inner: Arc::new(StreamInner {
                device,
                raw,
                is_owned,
            }),
        }
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &HipDevice {
        &self.inner.device
    }

    /// The runtime's handle, for the program's own HIP calls; null for the
    /// default stream.
    pub fn raw(&self) -> *mut c_void {
        self.inner.raw
    }

    /// Whether this is the device's default stream.
    pub fn is_default(&self) -> bool {
        self.inner.raw.is_null()
    }

    /// Waits for the work queued on the stream.
    ///
    /// # Errors
    ///
    /// The runtime's status, which reports a kernel that failed.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.device.make_current()?;
        // SAFETY: the stream is live while `self` is (made here, or vouched
        // for by `from_raw`'s caller).
        unsafe { result::stream_synchronize(self.inner.device.runtime(), self.inner.raw) }
    }
}

impl fmt::Debug for HipStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipStream")
            .field("device", &self.inner.device.ordinal())
            .field("raw", &self.inner.raw)
            .field("is_owned", &self.inner.is_owned)
            .finish()
    }
}
