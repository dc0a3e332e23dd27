//! The device half of the HIP backend (B2, B4).
//!
//! kiln has never had an AMD GPU: on the machines it is tested on, the HIP
//! runtime does not start, and that must be an error value. The launch test
//! is written for the day one exists; until then it skips with its reason,
//! and fails under `KILN_REQUIRE_DEVICE=1`.

use kiln_engine::conformance::skip;
use kiln_engine::{ArtifactId, CompilationTarget, DeviceId, Kernel, KernelId, KernelLoader};
use kiln_hip::{Error, HipDevice, HipKernel, HipTarget, KernelArgument, LaunchConfig};

/// Set in the child of the test below, which sees no GPU.
const WITHOUT_GPUS: &str = "KILN_HIP_TEST_WITHOUT_GPUS";

// B2
#[test]
fn b2_without_an_amd_gpu_opening_a_device_is_an_error_not_a_panic() {
    const TEST: &str = "b2_without_an_amd_gpu_opening_a_device_is_an_error_not_a_panic";
    let is_child = kiln_test_support::child::is_child(WITHOUT_GPUS, "1");
    match HipDevice::open(0) {
        Err(Error::NoDevice { call, name, .. }) => {
            assert!(call == "hipInit" || call == "hipGetDeviceCount", "{call}");
            assert!(!name.is_empty());
            let message = HipDevice::open(0).expect_err("still no device").to_string();
            assert!(message.starts_with("no AMD GPU is usable"), "{message}");
            assert!(
                matches!(HipDevice::count(), Err(Error::NoDevice { .. })),
                "counting devices is the same error"
            );
        }
        Err(Error::LibraryMissing {
            library, install, ..
        }) => {
            // Without the runtime there is no device either; the error says
            // how to get one.
            assert_eq!(library, "the HIP runtime");
            assert!(install.contains("libamdhip64"), "{install}");
        }
        Err(other) => panic!("no device should read as NoDevice, not: {other}"),
        Ok(device) => {
            assert!(
                !is_child,
                "HIP_VISIBLE_DEVICES hides every GPU, and {device:?} opened"
            );
            // A machine with an AMD GPU proves the rule in a child that
            // sees none, as a machine without one would.
            let output = kiln_test_support::child::rerun(TEST, WITHOUT_GPUS, "1")
                .env("HIP_VISIBLE_DEVICES", "")
                .env("ROCR_VISIBLE_DEVICES", "")
                .output()
                .expect("the test binary runs again");
            let report = kiln_test_support::child::describe(&output);
            assert!(output.status.success(), "the child failed: {report}");
            assert!(
                String::from_utf8_lossy(&output.stdout).contains("no AMD GPU here"),
                "the child got an error value: {report}"
            );
            return;
        }
    }
    println!("no AMD GPU here: an error value, as B2 asks");
}

// B4
#[test]
fn b4_a_kernel_launched_on_an_amd_gpu_computes_its_numbers() {
    let device = match HipDevice::open(0) {
        Ok(device) => device,
        Err(error) => {
            skip("B4 launch on an AMD GPU", &error.to_string());
            return;
        }
    };
    let target = HipTarget::on(device.clone()).expect("hipRTC is installed with the runtime");
    assert!(!target.is_compile_only());
    assert_eq!(
        target.device_id(),
        Some(DeviceId::new("hip", 0)),
        "the device's ordinal: its loader keeps the program's own profile"
    );
    let variant = target.variant();
    let mut loader = KernelLoader::new(target);
    let kernel = HipKernel::builder(KernelId::named("tests.axpy"), "axpy").source(
        r#"extern "C" __global__ void axpy(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"#,
    );
    let function = loader
        .load(&kernel, &ArtifactId::new(kernel.id(), variant))
        .expect("axpy compiles and loads");

    let n = 1000u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 + i as f32).collect();
    let x_buffer = device.upload(&x).expect("x copies");
    let y_buffer = device.upload(&y).expect("y copies");
    let arguments = [
        KernelArgument::buffer(&y_buffer),
        KernelArgument::buffer(&x_buffer),
        KernelArgument::scalar(2.0f32),
        KernelArgument::scalar(n),
    ];
    // The program's own non-blocking stream: the copy back must wait for
    // it without being told (B5).
    let stream = device.new_stream().expect("a stream");
    // SAFETY: the arguments match axpy's parameters, and the grid covers
    // exactly the n values of both buffers (the kernel checks `i < n`).
    unsafe { function.launch(&stream, LaunchConfig::for_elements(n, 256), &arguments) }
        .expect("the launch is accepted");
    let result = y_buffer.to_vec().expect("y copies back");
    for (i, value) in result.iter().enumerate() {
        assert_eq!(*value, 2.0 * i as f32 + 1.0 + i as f32, "y[{i}]");
    }
}
