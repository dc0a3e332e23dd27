//! The compile workers `kiln-worker` serves: the CUDA, HIP and wgpu
//! compilers (NVRTC, hipRTC, naga). `kiln-worker` is a binary of its own,
//! without the backend table; it includes this file, so that its list of
//! backends is here with the others (a test of the table checks it).

use kiln_engine::worker::WorkerEntry;

/// The worker entry of every backend that compiles in workers.
pub fn entries() -> Vec<WorkerEntry> {
    vec![
        kiln_cuda::worker_entry(),
        kiln_hip::worker_entry(),
        kiln_wgpu::worker_entry(),
    ]
}
