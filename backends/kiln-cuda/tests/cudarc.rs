//! kiln inside a cudarc program (B5): the program's own `CudaContext` in,
//! cudarc's `CudaModule` and `CudaFunction` out, every launch on the
//! program's own stream. Every test skips with a printed reason when there
//! is no GPU, and fails instead when `KILN_REQUIRE_DEVICE=1`.

mod support;

use std::sync::Arc;

use kiln_cuda::cudarc::driver::{
    CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig as CudarcLaunch,
    PinnedHostSlice, PushKernelArg,
};
use kiln_cuda::{CudaKernel, Error, KernelArgument, LaunchConfig, LoadedKernel};
use kiln_engine::{Kernel, KernelId};
use support::{id_on, loader, on_own_context};

const AFFINE: &str = r#"extern "C" __global__ void affine(const float* x, float* y, float scale, float shift, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale + shift;
}
"#;

/// Elements per copy: 4 MiB each way, so that a copy and a kernel that
/// were not ordered would overlap and be caught.
const ELEMENTS: usize = 1 << 20;

fn affine() -> CudaKernel {
    CudaKernel::builder(KernelId::named("tests.cudarc.affine"), "affine").source(AFFINE)
}

/// The input of iteration `iteration`: small integers, so that every
/// result is exact and a stale or missing element shows.
fn input_value(iteration: usize, index: usize) -> f32 {
    ((iteration * 7919 + index) % 1024) as f32
}

/// Pinned host memory, so that the stream's copies are truly asynchronous
/// (cudarc synchronizes the stream after a copy from pageable memory, which
/// would hide a missing order between the copy and the kernel).
fn pinned(context: &Arc<CudaContext>, len: usize) -> PinnedHostSlice<f32> {
    // SAFETY: the memory is written in full before any read of it: the
    // input by the host, the output by the copy back.
    unsafe { context.alloc_pinned_with_flags::<f32>(len, 0) }.expect("pinned host memory")
}

/// How each iteration launches the kiln-loaded kernel on the program's
/// stream.
#[derive(Clone, Copy, Debug)]
enum Launcher {
    /// cudarc's own launch builder with the kernel's `CudaFunction`.
    Cudarc,
    /// kiln's launch helper, given the stream.
    Kiln,
}

/// Copies `iterations` fresh inputs to the device on `stream`, launches
/// `kernel` on `stream`, copies the result back on `stream`, with no host
/// synchronization in between, and checks every element every time.
fn run_ordered_iterations(
    context: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    kernel: &LoadedKernel,
    launcher: Launcher,
    iterations: usize,
) {
    let mut host_input = pinned(context, ELEMENTS);
    let mut host_output = pinned(context, ELEMENTS);
    // SAFETY: the input is written by the copy from the host before the
    // kernel reads it.
    let mut device_input: CudaSlice<f32> = unsafe { stream.alloc(ELEMENTS) }.expect("alloc");
    // SAFETY: the output is cleared on the stream before every launch.
    let mut device_output: CudaSlice<f32> = unsafe { stream.alloc(ELEMENTS) }.expect("alloc");
    let count = i32::try_from(ELEMENTS).expect("the element count fits an int");
    let scale = 2.0f32;
    for iteration in 0..iterations {
        let shift = iteration as f32 + 0.5;
        for (index, value) in host_input
            .as_mut_slice()
            .expect("the input is free")
            .iter_mut()
            .enumerate()
        {
            *value = input_value(iteration, index);
        }
        stream
            .memcpy_htod(&host_input, &mut device_input)
            .expect("copy in on the program's stream");
        // Zeros are never a result (every shift ends in .5): a kernel that
        // ran before this memset, or not at all, is caught.
        stream
            .memset_zeros(&mut device_output)
            .expect("clear on the program's stream");
        match launcher {
            Launcher::Cudarc => {
                let mut launch = stream.launch_builder(kernel.function().expect("on a device"));
                launch
                    .arg(&device_input)
                    .arg(&mut device_output)
                    .arg(&scale)
                    .arg(&shift)
                    .arg(&count);
                // SAFETY: the arguments match affine(const float*, float*,
                // float, float, int) and both slices hold `count` floats.
                unsafe { launch.launch(CudarcLaunch::for_num_elems(ELEMENTS as u32)) }
                    .expect("cudarc launches the kiln-loaded function");
            }
            Launcher::Kiln => {
                let (input_pointer, _input_use) = device_input.device_ptr(stream);
                let (output_pointer, _output_use) = device_output.device_ptr_mut(stream);
                // SAFETY: the arguments match affine(const float*, float*,
                // float, float, int), both pointers hold `count` floats and
                // outlive the kernel (they are freed after the stream's
                // last synchronization).
                unsafe {
                    kernel.launch(
                        stream,
                        LaunchConfig::for_elements(ELEMENTS as u32, 256),
                        &[
                            KernelArgument::pointer(input_pointer),
                            KernelArgument::pointer(output_pointer),
                            scale.into(),
                            shift.into(),
                            count.into(),
                        ],
                    )
                }
                .expect("kiln launches on the program's stream");
            }
        }
        stream
            .memcpy_dtoh(&device_output, &mut host_output)
            .expect("copy back on the program's stream");
        // Reading the pinned output waits for the copy back, and nothing
        // else: the stream alone orders copy, kernel and copy.
        let output = host_output.as_slice().expect("the copy back finishes");
        let wrong = (0..ELEMENTS)
            .filter(|&index| output[index] != input_value(iteration, index) * scale + shift)
            .count();
        assert_eq!(
            wrong,
            0,
            "{launcher:?} iteration {iteration}: {wrong} of {ELEMENTS} elements are wrong \
             (first: {:?}); the kernel was not ordered with the copies of its stream",
            (0..ELEMENTS)
                .find(|&index| output[index] != input_value(iteration, index) * scale + shift)
                .map(|index| (index, output[index]))
        );
    }
}

// B5
#[test]
fn b5_a_kiln_kernel_launched_with_cudarc_on_the_programs_stream_is_ordered_with_its_copies() {
    let Some((context, target)) = on_own_context("B5 stream ordering with cudarc") else {
        return;
    };
    // A non-blocking stream, as cudarc programs make them: it does not order
    // against the legacy default stream, so only a launch on it is ordered.
    let stream = context.new_stream().expect("a stream of the program's");
    let (_, kernel) = support::load(target, &affine());
    let module = kernel.module().expect("a kernel on a device has a module");
    assert!(
        Arc::strong_count(module) >= 2,
        "the function holds the module it lives in, as the kernel does"
    );
    run_ordered_iterations(&context, &stream, &kernel, Launcher::Cudarc, 100);
}

// B5
#[test]
fn b5_kilns_own_launch_runs_on_the_stream_it_is_given() {
    let Some((context, target)) = on_own_context("B5 kiln launch on a given stream") else {
        return;
    };
    let stream = context.new_stream().expect("a stream of the program's");
    let (_, kernel) = support::load(target, &affine());
    run_ordered_iterations(&context, &stream, &kernel, Launcher::Kiln, 100);
}

// B5, B1
#[test]
fn b5_a_cudarc_function_keeps_its_module_loaded_after_kiln_lets_it_go() {
    let Some((context, target)) = on_own_context("B5 module lifetime through cudarc") else {
        return;
    };
    let stream = context.new_stream().expect("a stream of the program's");
    let fill = support::distinct(11);
    let function = {
        let (_, kernel) = support::load(target, &fill);
        kernel.function().expect("on a device").clone()
        // The loader, its target and every kiln handle of the kernel drop
        // here: the function's own reference keeps the module loaded.
    };
    let mut values = stream.alloc_zeros::<f32>(256).expect("alloc");
    let count = 256i32;
    let mut launch = stream.launch_builder(&function);
    launch.arg(&mut values).arg(&count);
    // SAFETY: fill(float*, int) with a slice of 256 floats.
    unsafe { launch.launch(CudarcLaunch::for_num_elems(256)) }
        .expect("the function launches after kiln dropped the kernel");
    let values = stream.clone_dtoh(&values).expect("copy back");
    assert!(values.iter().all(|&value| value == 11.0), "{values:?}");
    drop(function);
    stream
        .synchronize()
        .expect("the context is healthy after the module unloaded");
    context
        .check_err()
        .expect("cudarc recorded no error unloading the module on its own context");
    assert_eq!(fill.id(), support::distinct(11).id());
}

// B5, K6
#[test]
fn b5_a_launch_on_another_contexts_stream_is_refused() {
    let Some((context, target)) = on_own_context("B5 stream of another context") else {
        return;
    };
    let mut loader = loader(target);
    let fill = support::distinct(12);
    let kernel = loader
        .load(&fill, &id_on(loader.target(), &fill))
        .unwrap_or_else(|error| panic!("{error}"));
    let other = CudaContext::new_non_primary(0, 0).expect("a second context on GPU 0");
    let foreign = other.new_stream().expect("a stream of the second context");
    let output = kernel
        .device()
        .expect("on a device")
        .alloc::<f32>(1)
        .expect("alloc");
    // SAFETY: the launch is refused before the driver sees it; were it not,
    // fill(float*, int) with one float would still be in bounds.
    let launched = unsafe {
        kernel.launch(
            &foreign,
            LaunchConfig::for_elements(1, 1),
            &[(&output).into(), 1i32.into()],
        )
    };
    assert!(
        matches!(launched, Err(Error::ForeignStream { .. })),
        "{launched:?}"
    );
    drop(output);
    assert_eq!(context.ordinal(), other.ordinal());
}
