//! One function per raw call kiln-hip makes, each turning the library's
//! status into a `Result` and C strings into Rust ones. Handles stay raw
//! here; the safe types that own them are in [`crate::program`],
//! [`crate::device`] and [`crate::module`].

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::ptr;

use crate::error::{Error, Result};
use crate::sys::{self, ComgrLibrary, HipLibrary, HiprtcLibrary};

/// `text` as a C string.
///
/// # Errors
///
/// [`Error::InteriorNul`] naming `what`.
pub fn c_string(text: &str, what: impl FnOnce() -> String) -> Result<CString> {
    CString::new(text).map_err(|_| Error::InteriorNul { what: what() })
}

/// Copies a C string a library returned, or `None` for a null pointer.
///
/// # Safety
///
/// `text` is null or points to a NUL-terminated string alive for the call.
unsafe fn owned(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: not null, so the caller vouches it is a live C string.
    let text = unsafe { CStr::from_ptr(text) };
    Some(text.to_string_lossy().into_owned())
}

// ---------------------------------------------------------------- hipRTC

fn hiprtc_check(
    library: &HiprtcLibrary,
    call: &'static str,
    status: sys::hiprtcResult,
) -> Result<()> {
    if status == sys::HIPRTC_SUCCESS {
        return Ok(());
    }
    // SAFETY: hiprtcGetErrorString takes any status and returns a static
    // string or null.
    let message = unsafe { owned((library.hiprtcGetErrorString)(status)) }
        .unwrap_or_else(|| "an unknown status".to_owned());
    Err(Error::Hiprtc {
        call,
        code: status,
        message,
    })
}

/// hipRTC's `(major, minor)` version.
///
/// # Errors
///
/// hipRTC's status.
pub fn hiprtc_version(library: &HiprtcLibrary) -> Result<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: both pointers are writable.
    let status = unsafe { (library.hiprtcVersion)(&mut major, &mut minor) };
    hiprtc_check(library, "hiprtcVersion", status)?;
    Ok((major, minor))
}

/// A new program from `source`, with `headers` as `(include name, text)`.
///
/// # Errors
///
/// hipRTC's status.
pub fn create_program(
    library: &HiprtcLibrary,
    source: &CStr,
    name: &CStr,
    headers: &[(CString, CString)],
) -> Result<sys::hiprtcProgram> {
    let texts: Vec<*const c_char> = headers.iter().map(|(_, text)| text.as_ptr()).collect();
    let names: Vec<*const c_char> = headers.iter().map(|(name, _)| name.as_ptr()).collect();
    let count = c_int::try_from(headers.len()).expect("a kernel has fewer than 2^31 headers");
    let mut program = ptr::null_mut();
    // SAFETY: every pointer is a C string alive for the call, and the two
    // arrays have `count` entries; hipRTC copies what it keeps.
    let status = unsafe {
        (library.hiprtcCreateProgram)(
            &mut program,
            source.as_ptr(),
            name.as_ptr(),
            count,
            if headers.is_empty() {
                ptr::null()
            } else {
                texts.as_ptr()
            },
            if headers.is_empty() {
                ptr::null()
            } else {
                names.as_ptr()
            },
        )
    };
    hiprtc_check(library, "hiprtcCreateProgram", status)?;
    Ok(program)
}

/// Destroys `program`.
///
/// # Safety
///
/// `program` came from [`create_program`] with this library and is not used
/// afterwards.
///
/// # Errors
///
/// hipRTC's status.
pub unsafe fn destroy_program(
    library: &HiprtcLibrary,
    mut program: sys::hiprtcProgram,
) -> Result<()> {
    // SAFETY: the caller hands over a live program.
    let status = unsafe { (library.hiprtcDestroyProgram)(&mut program) };
    hiprtc_check(library, "hiprtcDestroyProgram", status)
}

/// Asks hipRTC to keep `expression` (a kernel name or a template
/// instantiation) and tell its lowered name after the compile.
///
/// # Safety
///
/// `program` is a live program of this library, not yet compiled.
///
/// # Errors
///
/// hipRTC's status.
pub unsafe fn add_name_expression(
    library: &HiprtcLibrary,
    program: sys::hiprtcProgram,
    expression: &CStr,
) -> Result<()> {
    // SAFETY: the caller vouches for `program`; hipRTC copies the string.
    let status = unsafe { (library.hiprtcAddNameExpression)(program, expression.as_ptr()) };
    hiprtc_check(library, "hiprtcAddNameExpression", status)
}

/// Compiles `program` with `options`.
///
/// # Safety
///
/// `program` is a live program of this library, and no other thread of the
/// process is inside hipRTC (ROCm 5's hipRTC aborts the process on
/// concurrent compiles).
///
/// # Errors
///
/// hipRTC's status; a program that does not compile is
/// [`sys::HIPRTC_ERROR_COMPILATION`], and its log says why.
pub unsafe fn compile_program(
    library: &HiprtcLibrary,
    program: sys::hiprtcProgram,
    options: &[CString],
) -> Result<()> {
    let pointers: Vec<*const c_char> = options.iter().map(|option| option.as_ptr()).collect();
    let count = c_int::try_from(options.len()).expect("fewer than 2^31 options");
    // SAFETY: the caller vouches for `program`; the options are C strings
    // alive for the call.
    let status = unsafe { (library.hiprtcCompileProgram)(program, count, pointers.as_ptr()) };
    hiprtc_check(library, "hiprtcCompileProgram", status)
}

/// The compile log of `program`; empty when the compiler said nothing.
///
/// # Safety
///
/// `program` is a live program of this library.
///
/// # Errors
///
/// hipRTC's status.
pub unsafe fn program_log(library: &HiprtcLibrary, program: sys::hiprtcProgram) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: the caller vouches for `program`; `size` is writable.
    let status = unsafe { (library.hiprtcGetProgramLogSize)(program, &mut size) };
    hiprtc_check(library, "hiprtcGetProgramLogSize", status)?;
    if size == 0 {
        return Ok(String::new());
    }
    // One byte more than asked: some releases count the NUL, some do not.
    let mut log = vec![0u8; size + 1];
    // SAFETY: `log` holds at least `size` bytes, what hipRTC writes.
    let status = unsafe { (library.hiprtcGetProgramLog)(program, log.as_mut_ptr().cast()) };
    hiprtc_check(library, "hiprtcGetProgramLog", status)?;
    let end = log.iter().position(|&byte| byte == 0).unwrap_or(log.len());
    log.truncate(end);
    Ok(String::from_utf8_lossy(&log).into_owned())
}

/// The code object `program` compiled to.
///
/// # Safety
///
/// `program` is a live program of this library that compiled.
///
/// # Errors
///
/// hipRTC's status.
pub unsafe fn code(library: &HiprtcLibrary, program: sys::hiprtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: the caller vouches for `program`; `size` is writable.
    let status = unsafe { (library.hiprtcGetCodeSize)(program, &mut size) };
    hiprtc_check(library, "hiprtcGetCodeSize", status)?;
    let mut code = vec![0u8; size];
    // SAFETY: `code` holds the `size` bytes hipRTC writes.
    let status = unsafe { (library.hiprtcGetCode)(program, code.as_mut_ptr().cast()) };
    hiprtc_check(library, "hiprtcGetCode", status)?;
    Ok(code)
}

/// The symbol `expression` was lowered to.
///
/// # Safety
///
/// `program` is a live program of this library that compiled, and
/// `expression` was added to it before.
///
/// # Errors
///
/// hipRTC's status.
pub unsafe fn lowered_name(
    library: &HiprtcLibrary,
    program: sys::hiprtcProgram,
    expression: &CStr,
) -> Result<String> {
    let mut lowered = ptr::null();
    // SAFETY: the caller vouches for `program`; `lowered` is writable.
    let status =
        unsafe { (library.hiprtcGetLoweredName)(program, expression.as_ptr(), &mut lowered) };
    hiprtc_check(library, "hiprtcGetLoweredName", status)?;
    // SAFETY: hipRTC returns a string owned by the program, alive until it is
    // destroyed; it is copied here.
    unsafe { owned(lowered) }.ok_or(Error::Hiprtc {
        call: "hiprtcGetLoweredName",
        code: sys::HIPRTC_SUCCESS,
        message: "it returned no name".to_owned(),
    })
}

// ----------------------------------------------------------------- comgr

fn comgr_check(call: &'static str, status: sys::amd_comgr_status_t) -> Result<()> {
    if status == sys::AMD_COMGR_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::Comgr { call, code: status })
    }
}

/// comgr's `(major, minor)` version.
pub fn comgr_version(library: &ComgrLibrary) -> (usize, usize) {
    let (mut major, mut minor) = (0usize, 0usize);
    // SAFETY: both pointers are writable.
    unsafe { (library.amd_comgr_get_version)(&mut major, &mut minor) };
    (major, minor)
}

/// Every ISA comgr can compile for, by its full name
/// (`amdgcn-amd-amdhsa--gfx90a`).
///
/// # Errors
///
/// comgr's status.
pub fn isa_names(library: &ComgrLibrary) -> Result<Vec<String>> {
    let mut count = 0usize;
    // SAFETY: `count` is writable.
    comgr_check("amd_comgr_get_isa_count", unsafe {
        (library.amd_comgr_get_isa_count)(&mut count)
    })?;
    let mut names = Vec::with_capacity(count);
    for index in 0..count {
        let mut name = ptr::null();
        // SAFETY: `index` is below the count comgr gave; `name` is writable.
        comgr_check("amd_comgr_get_isa_name", unsafe {
            (library.amd_comgr_get_isa_name)(index, &mut name)
        })?;
        // SAFETY: comgr returns a static NUL-terminated name.
        if let Some(name) = unsafe { owned(name) } {
            names.push(name);
        }
    }
    Ok(names)
}

/// Whether comgr accepts the full ISA name `isa`, features included
/// (`amdgcn-amd-amdhsa--gfx90a:xnack-`).
///
/// # Errors
///
/// comgr's status, other than its refusal of the name.
pub fn accepts_isa(library: &ComgrLibrary, isa: &CStr) -> Result<bool> {
    let mut metadata = sys::amd_comgr_metadata_node_t { handle: 0 };
    // SAFETY: `isa` is a C string; `metadata` is writable.
    let status = unsafe { (library.amd_comgr_get_isa_metadata)(isa.as_ptr(), &mut metadata) };
    match status {
        sys::AMD_COMGR_STATUS_SUCCESS => {
            // SAFETY: comgr made the node just above and it is not used again.
            let status = unsafe { (library.amd_comgr_destroy_metadata)(metadata) };
            comgr_check("amd_comgr_destroy_metadata", status)?;
            Ok(true)
        }
        sys::AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT => Ok(false),
        other => Err(Error::Comgr {
            call: "amd_comgr_get_isa_metadata",
            code: other,
        }),
    }
}

// ----------------------------------------------------------- HIP runtime

/// The runtime's name for `status`.
pub fn hip_error_name(library: &HipLibrary, status: sys::hipError_t) -> String {
    // SAFETY: hipGetErrorName takes any status and returns a static string.
    unsafe { owned((library.hipGetErrorName)(status)) }
        .unwrap_or_else(|| "an unknown status".to_owned())
}

fn hip_check(library: &HipLibrary, call: &'static str, status: sys::hipError_t) -> Result<()> {
    if status == sys::HIP_SUCCESS {
        return Ok(());
    }
    Err(Error::Hip {
        call,
        code: status,
        name: hip_error_name(library, status),
    })
}

/// Starts the runtime.
///
/// # Errors
///
/// [`Error::NoDevice`]: a runtime that does not start has no device to
/// offer.
pub fn init(library: &HipLibrary) -> Result<()> {
    // SAFETY: hipInit takes flags, which must be 0.
    let status = unsafe { (library.hipInit)(0) };
    if status == sys::HIP_SUCCESS {
        return Ok(());
    }
    Err(Error::NoDevice {
        call: "hipInit",
        code: status,
        name: hip_error_name(library, status),
    })
}

/// How many devices the runtime sees (at least one).
///
/// # Errors
///
/// [`Error::NoDevice`] when the count fails or is zero.
pub fn device_count(library: &HipLibrary) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: `count` is writable.
    let status = unsafe { (library.hipGetDeviceCount)(&mut count) };
    if status != sys::HIP_SUCCESS {
        return Err(Error::NoDevice {
            call: "hipGetDeviceCount",
            code: status,
            name: hip_error_name(library, status),
        });
    }
    match usize::try_from(count) {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(Error::NoDevice {
            call: "hipGetDeviceCount",
            code: status,
            name: "no device".to_owned(),
        }),
    }
}

/// Makes `ordinal` the calling thread's current device.
///
/// # Errors
///
/// The runtime's status.
pub fn set_device(library: &HipLibrary, ordinal: i32) -> Result<()> {
    // SAFETY: any ordinal is accepted or refused with a status.
    hip_check(library, "hipSetDevice", unsafe {
        (library.hipSetDevice)(ordinal)
    })
}

/// The raw bytes of `ordinal`'s `hipDeviceProp_t`.
///
/// # Errors
///
/// The runtime's status.
pub fn device_properties(library: &HipLibrary, ordinal: i32) -> Result<Vec<u8>> {
    // hipDeviceProp_t is about 1.5 KiB in ROCm 6 and smaller before; the
    // buffer is far larger, so no release writes past it.
    let mut properties = vec![0u8; 16 * 1024];
    // SAFETY: the buffer is larger than any release's hipDeviceProp_t.
    let status =
        unsafe { (library.hipGetDeviceProperties)(properties.as_mut_ptr().cast(), ordinal) };
    hip_check(library, "hipGetDeviceProperties", status)?;
    Ok(properties)
}

/// Loads a code object on the current device.
///
/// # Safety
///
/// `image` is a complete code object: hipModuleLoadData takes no length and
/// reads as far as the object's own headers say.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn module_load_data(library: &HipLibrary, image: &[u8]) -> Result<sys::hipModule_t> {
    let mut module = ptr::null_mut();
    // SAFETY: the caller vouches that `image` holds all the object.
    let status = unsafe { (library.hipModuleLoadData)(&mut module, image.as_ptr().cast()) };
    hip_check(library, "hipModuleLoadData", status)?;
    Ok(module)
}

/// Unloads `module`.
///
/// # Safety
///
/// `module` is loaded and neither it nor its functions are used afterwards.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn module_unload(library: &HipLibrary, module: sys::hipModule_t) -> Result<()> {
    // SAFETY: the caller hands over a loaded module.
    hip_check(library, "hipModuleUnload", unsafe {
        (library.hipModuleUnload)(module)
    })
}

/// The kernel `symbol` of `module`.
///
/// # Safety
///
/// `module` is loaded.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn module_get_function(
    library: &HipLibrary,
    module: sys::hipModule_t,
    symbol: &CStr,
) -> Result<sys::hipFunction_t> {
    let mut function = ptr::null_mut();
    // SAFETY: the caller vouches for `module`; `symbol` is a C string.
    let status = unsafe { (library.hipModuleGetFunction)(&mut function, module, symbol.as_ptr()) };
    hip_check(library, "hipModuleGetFunction", status)?;
    Ok(function)
}

/// Launches `function` on `stream` (null: the default stream).
///
/// # Safety
///
/// `function` is a kernel of a loaded module of the current device,
/// `stream` a live stream of that device or null, and `arguments` points
/// at one value per kernel parameter, each of the parameter's type.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn launch_kernel(
    library: &HipLibrary,
    function: sys::hipFunction_t,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    shared_memory_bytes: u32,
    stream: sys::hipStream_t,
    arguments: &mut [*mut c_void],
) -> Result<()> {
    // SAFETY: the caller vouches for the function and its arguments.
    let status = unsafe {
        (library.hipModuleLaunchKernel)(
            function,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            shared_memory_bytes,
            stream,
            arguments.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    hip_check(library, "hipModuleLaunchKernel", status)
}

/// A new stream on the current device that does not wait for the default
/// stream.
///
/// # Errors
///
/// The runtime's status.
pub fn stream_create(library: &HipLibrary) -> Result<sys::hipStream_t> {
    let mut stream = ptr::null_mut();
    // SAFETY: `stream` is a live local the runtime writes the handle to.
    let status =
        unsafe { (library.hipStreamCreateWithFlags)(&mut stream, sys::HIP_STREAM_NON_BLOCKING) };
    hip_check(library, "hipStreamCreateWithFlags", status)?;
    Ok(stream)
}

/// Destroys `stream` once the work queued on it has finished.
///
/// # Safety
///
/// `stream` was made by [`stream_create`] and is not used after.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn stream_destroy(library: &HipLibrary, stream: sys::hipStream_t) -> Result<()> {
    // SAFETY: the caller vouches for the handle.
    hip_check(library, "hipStreamDestroy", unsafe {
        (library.hipStreamDestroy)(stream)
    })
}

/// Waits for the work queued on `stream`.
///
/// # Safety
///
/// `stream` is a live stream (or null, the default stream).
///
/// # Errors
///
/// The runtime's status, which reports a failed kernel.
pub unsafe fn stream_synchronize(library: &HipLibrary, stream: sys::hipStream_t) -> Result<()> {
    // SAFETY: the caller vouches for the handle.
    hip_check(library, "hipStreamSynchronize", unsafe {
        (library.hipStreamSynchronize)(stream)
    })
}

/// Waits for every launch on the current device.
///
/// # Errors
///
/// The runtime's status, which reports a failed kernel.
pub fn synchronize(library: &HipLibrary) -> Result<()> {
    // SAFETY: takes nothing.
    hip_check(library, "hipDeviceSynchronize", unsafe {
        (library.hipDeviceSynchronize)()
    })
}

/// `bytes` of device memory on the current device.
///
/// # Errors
///
/// The runtime's status.
pub fn malloc(library: &HipLibrary, bytes: usize) -> Result<sys::hipDeviceptr_t> {
    let mut pointer = ptr::null_mut();
    // SAFETY: `pointer` is writable.
    hip_check(library, "hipMalloc", unsafe {
        (library.hipMalloc)(&mut pointer, bytes)
    })?;
    Ok(pointer)
}

/// Frees device memory.
///
/// # Safety
///
/// `pointer` came from [`malloc`] and is not used afterwards.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn free(library: &HipLibrary, pointer: sys::hipDeviceptr_t) -> Result<()> {
    // SAFETY: the caller hands over the allocation.
    hip_check(library, "hipFree", unsafe { (library.hipFree)(pointer) })
}

/// Copies `bytes` to the device.
///
/// # Safety
///
/// `destination` is device memory of at least `bytes.len()` bytes.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn copy_to_device(
    library: &HipLibrary,
    destination: sys::hipDeviceptr_t,
    bytes: &[u8],
) -> Result<()> {
    // SAFETY: the caller vouches for the destination's size.
    hip_check(library, "hipMemcpyHtoD", unsafe {
        (library.hipMemcpyHtoD)(destination, bytes.as_ptr().cast(), bytes.len())
    })
}

/// Copies device memory into `bytes`.
///
/// # Safety
///
/// `source` is device memory of at least `bytes.len()` bytes.
///
/// # Errors
///
/// The runtime's status.
pub unsafe fn copy_to_host(
    library: &HipLibrary,
    bytes: &mut [u8],
    source: sys::hipDeviceptr_t,
) -> Result<()> {
    // SAFETY: the caller vouches for the source's size.
    hip_check(library, "hipMemcpyDtoH", unsafe {
        (library.hipMemcpyDtoH)(bytes.as_mut_ptr().cast(), source, bytes.len())
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::c_uint;
    use std::sync::Mutex;

    use kiln_cxx::KernelArgument;

    use super::*;

    /// What the stand-in for `hipModuleLaunchKernel` was handed.
    #[derive(Debug, PartialEq)]
    struct Launch {
        function: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_memory_bytes: u32,
        stream: usize,
        /// Each parameter's bytes, read through the pointer array.
        parameters: Vec<Vec<u8>>,
        has_extra: bool,
    }

    static LAUNCHES: Mutex<Vec<Launch>> = Mutex::new(Vec::new());

    /// The byte sizes of the parameters the stand-in reads: a float, a
    /// pointer and an unsigned int, as `axpy`-like kernels take them.
    const SIZES: [usize; 3] = [4, 8, 4];

    #[allow(
        clippy::too_many_arguments,
        reason = "hipModuleLaunchKernel's C declaration"
    )]
    unsafe extern "C" fn recording_launch(
        function: sys::hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_memory_bytes: c_uint,
        stream: sys::hipStream_t,
        parameters: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> sys::hipError_t {
        let parameters = SIZES
            .iter()
            .enumerate()
            .map(|(index, &size)| {
                // SAFETY: the launch under test hands one pointer per
                // argument, each to that argument's `size` bytes.
                unsafe {
                    let pointer = *parameters.add(index);
                    std::slice::from_raw_parts(pointer.cast::<u8>(), size).to_vec()
                }
            })
            .collect();
        LAUNCHES
            .lock()
            .expect("no test panicked holding the record")
            .push(Launch {
                function: function as usize,
                grid: (grid_x, grid_y, grid_z),
                block: (block_x, block_y, block_z),
                shared_memory_bytes,
                stream: stream as usize,
                parameters,
                has_extra: !extra.is_null(),
            });
        sys::HIP_SUCCESS
    }

    // B5
    #[test]
    fn a_launch_hands_the_runtime_its_stream_its_shape_and_each_argument_by_its_bytes() {
        // The runtime library is opened for real (it opens without a GPU);
        // only its launch is replaced, so nothing reaches a device.
        let mut library = match HipLibrary::open() {
            Ok(library) => library,
            Err(error) => {
                kiln_test_support::skip("the HIP launch's arguments", &error.to_string());
                return;
            }
        };
        library.hipModuleLaunchKernel = recording_launch;
        let stream = 0x5000usize as sys::hipStream_t;
        let function = 0x7000usize as sys::hipFunction_t;
        let arguments = [
            KernelArgument::scalar(2.5f32),
            KernelArgument::pointer(0x1234_5678_9abc_u64),
            KernelArgument::scalar(1000u32),
        ];
        kiln_cxx::launch::with_parameters(&arguments, |parameters| {
            // SAFETY: the launch goes to the recording stand-in, which reads
            // the three parameters and touches no device.
            unsafe {
                launch_kernel(
                    &library,
                    function,
                    (4, 2, 1),
                    (256, 1, 1),
                    1024,
                    stream,
                    parameters,
                )
            }
        })
        .expect("the stand-in accepts the launch");
        let launches = LAUNCHES
            .lock()
            .expect("no test panicked holding the record");
        assert_eq!(
            *launches,
            [Launch {
                function: 0x7000,
                grid: (4, 2, 1),
                block: (256, 1, 1),
                shared_memory_bytes: 1024,
                stream: 0x5000,
                parameters: vec![
                    2.5f32.to_ne_bytes().to_vec(),
                    0x1234_5678_9abc_u64.to_ne_bytes().to_vec(),
                    1000u32.to_ne_bytes().to_vec(),
                ],
                has_extra: false,
            }]
        );
    }
}
