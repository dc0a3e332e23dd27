//! naga on untrusted input, in a bounded place: a shader that panics
//! naga's front end or validator fails its own kernel, with a message,
//! never the process; a shader larger than [`MAX_SHADER_BYTES`] is refused
//! before naga reads it; and a compiler made with
//! [`WgpuCompiler::in_workers`](crate::WgpuCompiler::in_workers) finalizes
//! in compile worker processes, each under the loader's compile timeout
//! and the memory limit its recipe names, so a shader that makes naga run
//! away (memory that grows, a parse that never ends) costs one worker and
//! one kernel.

use std::panic::AssertUnwindSafe;

use kiln_engine::CompileFailure;

/// The largest shader kiln hands to naga: WGSL text with its imported
/// modules, or a SPIR-V module's bytes (16 MiB). A larger one fails its
/// kernel before any parse.
pub const MAX_SHADER_BYTES: usize = 16 << 20;

/// The address space a compile worker of wgpu kernels may take when the
/// program sets no other (2 GiB): naga needs a few MiB for the largest
/// real shaders.
pub const DEFAULT_WORKER_MEMORY: u64 = 2 << 30;

/// Refuses a shader of `bytes` bytes above [`MAX_SHADER_BYTES`].
pub(crate) fn check_size(label: &str, bytes: usize) -> Result<(), CompileFailure> {
    if bytes <= MAX_SHADER_BYTES {
        return Ok(());
    }
    Err(CompileFailure::message(format!(
        "{label}: the shader is {bytes} bytes, more than the {} MiB kiln hands to naga",
        MAX_SHADER_BYTES >> 20
    ))
    .with_hint("split the shader into smaller modules"))
}

/// Runs `work` (naga's front end, validator or constants pass on `label`),
/// a panic in it becoming the kernel's failure.
pub(crate) fn contain<T>(
    label: &str,
    work: impl FnOnce() -> Result<T, CompileFailure>,
) -> Result<T, CompileFailure> {
    match std::panic::catch_unwind(AssertUnwindSafe(work)) {
        Ok(result) => result,
        Err(payload) => Err(CompileFailure::message(format!(
            "{label}: naga panicked reading the shader: {}",
            panic_text(payload.as_ref())
        ))
        .with_hint(
            "the shader is malformed in a way naga does not report as an error; for SPIR-V, \
             spirv-val says what is wrong with the module",
        )),
    }
}

/// The text a panic was raised with.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<String>() {
        return text.clone();
    }
    payload.downcast_ref::<&str>().map_or_else(
        || "a panic without a message".to_owned(),
        |text| (*text).to_owned(),
    )
}

/// Limits this process's address space to `bytes` (soft and hard), in a
/// compile worker: an allocation past it aborts the worker, whose loader
/// fails that kernel alone. A limit already lower is kept.
pub(crate) fn limit_memory(bytes: u64) -> Result<(), String> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &raw mut current) } != 0 {
        return Err(format!(
            "the memory limit could not be read: {}",
            std::io::Error::last_os_error()
        ));
    }
    let wanted = libc::rlim_t::try_from(bytes).unwrap_or(libc::RLIM_INFINITY);
    let limit = libc::rlimit {
        rlim_cur: wanted.min(current.rlim_cur),
        rlim_max: wanted.min(current.rlim_max),
    };
    // SAFETY: setrlimit reads one rlimit; lowering a limit needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &raw const limit) } != 0 {
        return Err(format!(
            "the memory limit of {bytes} bytes could not be set: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_the_kernels_failure() {
        let failure =
            contain::<()>("bad.spv", || panic!("index out of bounds")).expect_err("it panicked");
        let message = failure.to_string();
        assert!(
            message.contains("bad.spv") && message.contains("index out of bounds"),
            "{message}"
        );
        assert_eq!(contain("good.spv", || Ok(7)).ok(), Some(7));
    }

    #[test]
    fn a_shader_over_the_budget_is_refused_before_naga() {
        assert!(check_size("big.wgsl", MAX_SHADER_BYTES).is_ok());
        let failure = check_size("big.wgsl", MAX_SHADER_BYTES + 1).expect_err("too big");
        assert!(failure.to_string().contains("16 MiB"), "{failure}");
    }
}
