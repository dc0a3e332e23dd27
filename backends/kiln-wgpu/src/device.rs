//! A wgpu device as kiln uses it: the user's own, or one kiln opens on the
//! first Vulkan adapter; every call kiln makes on it inside error scopes, so
//! that wgpu's validation errors become values instead of panics.
//!
//! kiln is not a tensor library: the buffer helpers here and
//! [`WgpuDevice::dispatch`] (in `launch`) are enough to launch a kernel and
//! read its result, nothing more.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use crate::error::Error;

/// A wgpu device and its queue, with what kiln reads about its adapter once:
/// cheap to clone (wgpu's handles are reference-counted).
#[derive(Clone, Debug)]
pub struct WgpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    driver_identity: Option<DriverIdentity>,
    /// The adapter's features, when kiln opened the device.
    adapter_features: Option<wgpu::Features>,
}

/// What the Vulkan driver says about its own pipeline cache format, which
/// wgpu does not pass on: read with ash through wgpu's hal, for the key of
/// the stored pipeline cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverIdentity {
    /// `VkPhysicalDeviceProperties::driverVersion`, as the driver encodes it.
    pub driver_version: u32,
    /// `VkPhysicalDeviceProperties::pipelineCacheUUID`: drivers change it
    /// whenever their cache data stops being compatible.
    pub pipeline_cache_uuid: [u8; 16],
}

impl WgpuDevice {
    /// Wraps the caller's device, as it is: kiln asks for no feature, and a
    /// kernel that needs one the device was not created with (f64, i64,
    /// f16, subgroups, ...) fails naming it. kiln never replaces the
    /// device's uncaptured-error handler: every call it makes is inside
    /// error scopes.
    pub fn new(device: wgpu::Device, queue: wgpu::Queue) -> Self {
        let info = device.adapter_info();
        let driver_identity = driver_identity(&device);
        Self {
            device,
            queue,
            info,
            driver_identity,
            adapter_features: None,
        }
    }

    /// Opens a device on the best Vulkan adapter here (a discrete GPU before
    /// an integrated one before a CPU one), with the adapter's limits and
    /// every feature it has of [`SHADER_FEATURES`](crate::SHADER_FEATURES)
    /// (what WGSL and SPIR-V kernels can use: f64, i64, f16, subgroups, ...)
    /// and [`wgpu::Features::PIPELINE_CACHE`]. Errors nobody captured are
    /// logged, never a panic.
    ///
    /// # Errors
    ///
    /// [`Error::NoAdapter`] when there is no Vulkan loader, driver or device
    /// (this never panics, loader or not), [`Error::RequestDevice`] when the
    /// adapter will not open a device.
    pub fn open() -> Result<Self, Error> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN,
            flags: wgpu::InstanceFlags::from_build_config().with_env(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        // Where the opening's time goes (the Vulkan loader loads every
        // installed driver for the instance): in `kiln -vv`'s timed lines.
        log::debug!("wgpu: Vulkan instance made");
        let adapter = block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..wgpu::RequestAdapterOptions::default()
        }))
        .map_err(|error| Error::NoAdapter {
            detail: format!(
                "{error} (looked for a Vulkan adapter; a machine without one needs a Vulkan \
                 loader and driver, e.g. Debian's libvulkan1 and mesa-vulkan-drivers)"
            ),
        })?;
        let adapter_features = adapter.features();
        let required_features = adapter_features
            & (crate::SHADER_FEATURES
                | wgpu::Features::PIPELINE_CACHE
                | wgpu::Features::PASSTHROUGH_SHADERS);
        let info = adapter.get_info();
        log::debug!("wgpu: adapter {} chosen", info.name);
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kiln"),
            required_features,
            required_limits: adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|error| Error::RequestDevice {
            adapter: info.name.clone(),
            detail: error.to_string(),
        })?;
        device.on_uncaptured_error(Arc::new(|error: wgpu::Error| {
            log::error!("wgpu error outside kiln's error scopes: {error}");
        }));
        log::debug!("wgpu: device opened on {}", info.name);
        Ok(Self {
            adapter_features: Some(adapter_features),
            ..Self::new(device, queue)
        })
    }

    /// The features the device was created with.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }

    /// The adapter's features, when kiln opened the device
    /// ([`open`](Self::open)); `None` for the caller's own device, whose
    /// adapter kiln does not see.
    pub fn adapter_features(&self) -> Option<wgpu::Features> {
        self.adapter_features
    }

    /// The wgpu device.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The device's queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// What wgpu says about the adapter.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// What the Vulkan driver says about its pipeline caches; `None` off
    /// Vulkan.
    pub fn driver_identity(&self) -> Option<DriverIdentity> {
        self.driver_identity
    }

    /// Whether pipeline caches can be made on this device: the adapter has
    /// [`wgpu::Features::PIPELINE_CACHE`] and the device was opened with it.
    pub fn has_pipeline_cache(&self) -> bool {
        self.device
            .features()
            .contains(wgpu::Features::PIPELINE_CACHE)
    }

    /// The adapter as one line: `llvmpipe (LLVM 15.0.6, 256 bits) (Cpu,
    /// llvmpipe, Mesa 22.3.6)`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {}, {})",
            self.info.name, self.info.device_type, self.info.driver, self.info.driver_info
        )
    }

    /// Runs `work` with every error it causes on this device captured, on
    /// this thread: validation errors, running out of memory and internal
    /// errors come back as the first one captured instead of reaching the
    /// uncaptured-error handler (whose default panics).
    pub fn capture<R>(&self, work: impl FnOnce() -> R) -> (R, Option<wgpu::Error>) {
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let result = work();
        // Innermost first: scopes pop in reverse order of their pushing.
        let validation = block_on(validation.pop());
        let memory = block_on(memory.pop());
        let internal = block_on(internal.pop());
        (result, validation.or(memory).or(internal))
    }

    /// A storage buffer holding `bytes`, which kernels read and write and
    /// [`read`](Self::read) copies back.
    ///
    /// # Errors
    ///
    /// wgpu refused the buffer (too large, out of memory).
    pub fn storage_buffer(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer, Error> {
        self.buffer(
            label,
            bytes,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        )
    }

    /// A uniform buffer holding `bytes`.
    ///
    /// # Errors
    ///
    /// wgpu refused the buffer.
    pub fn uniform_buffer(&self, label: &str, bytes: &[u8]) -> Result<wgpu::Buffer, Error> {
        self.buffer(
            label,
            bytes,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        )
    }

    fn buffer(
        &self,
        label: &str,
        bytes: &[u8],
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, Error> {
        // Buffer sizes are multiples of 4 for copies; a zero-sized binding
        // is not allowed either.
        let size = (bytes.len().max(4) as u64).next_multiple_of(4);
        let (buffer, error) = self.capture(|| {
            let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            });
            if !bytes.is_empty() {
                let mut padded = bytes.to_vec();
                padded.resize(size as usize, 0);
                self.queue.write_buffer(&buffer, 0, &padded);
            }
            buffer
        });
        match error {
            Some(error) => Err(Error::Device {
                operation: "creating a buffer",
                detail: error.to_string(),
            }),
            None => Ok(buffer),
        }
    }

    /// The contents of `buffer` (a storage buffer made here), once the work
    /// submitted before has finished.
    ///
    /// # Errors
    ///
    /// wgpu refused the copy or the mapping, or the device was lost.
    pub fn read(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>, Error> {
        let failed = |operation, detail: String| Error::Device { operation, detail };
        let size = buffer.size();
        let (staging, error) = self.capture(|| {
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("kiln readback"),
                });
            encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, size);
            self.queue.submit([encoder.finish()]);
            staging
        });
        if let Some(error) = error {
            return Err(failed("copying a buffer back", error.to_string()));
        }
        let (sender, receiver) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |mapped| {
            let _ = sender.send(mapped);
        });
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: None,
                timeout: None,
            })
            .map_err(|error| failed("waiting for the device", error.to_string()))?;
        receiver
            .recv()
            .map_err(|_| failed("mapping a buffer", "the mapping never answered".into()))?
            .map_err(|error| failed("mapping a buffer", error.to_string()))?;
        let bytes = staging
            .get_mapped_range(..)
            .map_err(|error| failed("reading a mapped buffer", error.to_string()))?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }
}

/// The driver's pipeline cache identity, read with ash through wgpu's hal:
/// wgpu keeps `pipelineCacheUUID` to itself, and a cache made under another
/// one is data the driver ignores.
fn driver_identity(device: &wgpu::Device) -> Option<DriverIdentity> {
    // SAFETY: the hal device is only borrowed for the two reads below and
    // not kept; nothing is created or destroyed through it.
    let hal_device = unsafe { device.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal_device.shared_instance().raw_instance();
    // SAFETY: the physical device belongs to this instance (both come from
    // the same live hal device), and reading its properties has no other
    // requirement.
    let properties =
        unsafe { instance.get_physical_device_properties(hal_device.raw_physical_device()) };
    Some(DriverIdentity {
        driver_version: properties.driver_version,
        pipeline_cache_uuid: properties.pipeline_cache_uuid,
    })
}

/// Runs `future` to completion on this thread. wgpu's native futures are
/// ready at once or after a device poll; this parks the thread between
/// polls instead of needing an executor crate.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::thread::park();
    }
}
