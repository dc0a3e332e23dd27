//! kiln-wgpu's errors.
//!
//! A compile failure is not one of these: it belongs to the kernel that
//! failed, as kiln-engine's [`CompileFailure`](kiln_engine::CompileFailure) on
//! that kernel's `KernelError`, and a pipeline the device rejects is that
//! kernel's [`DeviceRefusal`](kiln_engine::DeviceRefusal). These are the
//! errors of opening a device and of using it directly (buffers, dispatches).

/// What went wrong opening a wgpu device or using it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No adapter: no Vulkan loader (`libvulkan.so.1`), no driver, or no
    /// device the driver offers. Install a Vulkan driver (`cargo xtask
    /// setup` installs Mesa's lavapipe), or compile without a device.
    #[error("no wgpu adapter: {detail}")]
    NoAdapter {
        /// wgpu's answer, and what was looked for.
        detail: String,
    },
    /// The adapter refused to open a device with the features and limits
    /// asked for.
    #[error("the adapter `{adapter}` did not open a device: {detail}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's answer.
        detail: String,
    },
    /// The adapter profile compile-only mode names (`KILN_WGPU_PROFILE`)
    /// is neither a profile file nor a built-in profile, or does not parse.
    #[error("the wgpu adapter profile `{profile}` cannot be used: {detail}")]
    AdapterProfile {
        /// The profile as named.
        profile: String,
        /// What is wrong, and what to do.
        detail: String,
    },
    /// The pipeline was loaded by a compile-only target: there is no device
    /// to dispatch it on.
    #[error("kernel `{entry}` was compiled without a device (compile-only target): it cannot run")]
    CompileOnly {
        /// The kernel's entry point.
        entry: String,
    },
    /// A bind group was asked of a pipeline that has fewer: the kernel's
    /// entry point binds nothing in that group.
    #[error("kernel `{entry}` has {groups} bind groups, not group {group}")]
    NoSuchGroup {
        /// The kernel's entry point.
        entry: String,
        /// The group asked for.
        group: u32,
        /// How many bind groups the pipeline has.
        groups: usize,
    },
    /// A buffer, bind group or dispatch was refused by wgpu's validation,
    /// or the device ran out of memory or was lost.
    #[error("{operation} failed: {detail}")]
    Device {
        /// What was being done.
        operation: &'static str,
        /// wgpu's error.
        detail: String,
    },
}
