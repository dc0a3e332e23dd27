//! The CUDA backend on a GPU (B1, B4): kernels launched and checked against
//! a CPU reference on fresh random inputs, and artifacts the driver refuses.
//! Every test skips with a printed reason when there is no GPU, and fails
//! instead when `KILN_REQUIRE_DEVICE=1`.
//!
//! A kernel loaded from the disk store by a second process, launched on the
//! same inputs, is tested in `tests/store.rs`.

mod support;

use kiln_cuda::{
    Architecture, CudaArtifact, CudaDevice, CudaKernel, CudaOptions, CudaTarget, CudaVariant,
    DeviceBuffer, KernelArgument, LaunchConfig, LoadedImage, LoadedKernel,
};
use kiln_engine::{ArtifactId, CompilationTarget, Failure, Kernel, KernelId, KernelOutcome, Stage};
use support::{Random, fixed, id_on, loader, on_device};

use support::load;

/// Whether every element of `actual` is within `tolerance[i]` of
/// `expected`, reporting the worst one otherwise.
fn assert_close(what: &str, actual: &[f32], expected: &[f64], tolerance: impl Fn(usize) -> f64) {
    assert_eq!(actual.len(), expected.len());
    for (index, (&got, &want)) in actual.iter().zip(expected).enumerate() {
        let error = (f64::from(got) - want).abs();
        assert!(
            error <= tolerance(index),
            "{what}[{index}] = {got}, expected {want} (error {error:e} over {:e})",
            tolerance(index)
        );
    }
}

// B1, B4
#[test]
fn b4_saxpy_matches_the_cpu() {
    let Some(target) = on_device("B4 saxpy") else {
        return;
    };
    assert_eq!(
        target.architecture(),
        target.device().expect("a device").architecture(),
        "the target compiles for the device's exact architecture"
    );
    let saxpy = fixed("tests.saxpy", "saxpy", support::SAXPY);
    let (device, kernel) = load(target, &saxpy);
    let stream = device.context().new_stream().expect("a stream");
    assert_eq!(
        kernel.image(),
        LoadedImage::Cubin,
        "the cubin loads as it is"
    );
    let mut random = Random::fresh("saxpy");
    for n in [1usize, 1000, 1 << 20] {
        support::check_saxpy("saxpy", &device, &stream, &kernel, &mut random, n);
    }
}

const BLOCK_SUM: &str = r#"extern "C" __global__ void block_sum(const float* input, float* partial, unsigned int n) {
    extern __shared__ float cache[];
    unsigned int tid = threadIdx.x;
    float sum = 0.0f;
    for (unsigned int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) {
        sum += input[i];
    }
    cache[tid] = sum;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) cache[tid] += cache[tid + stride];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = cache[0];
}
"#;

// B4
#[test]
fn b4_a_reduction_in_dynamic_shared_memory_matches_the_cpu() {
    let Some(target) = on_device("B4 reduction") else {
        return;
    };
    let block_sum = fixed("tests.block_sum", "block_sum", BLOCK_SUM);
    let (device, kernel) = load(target, &block_sum);
    let stream = device.context().new_stream().expect("a stream");
    let mut random = Random::fresh("reduction");
    let threads = 256u32;
    let blocks = 120u32;
    for n in [1usize, 4097, 1_000_003] {
        let input: Vec<f32> = (0..n).map(|_| random.unit()).collect();
        let input_device = device.upload(&input).expect("upload");
        let mut partial: DeviceBuffer<f32> = device.alloc(blocks as usize).expect("alloc");
        let mut total: DeviceBuffer<f32> = device.alloc(1).expect("alloc");
        partial
            .copy_from_host(&vec![f32::NAN; blocks as usize])
            .expect("poison");
        total.copy_from_host(&[f32::NAN]).expect("poison");
        let config = LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_memory_bytes: threads * 4,
        };
        // SAFETY: block_sum(const float*, float*, unsigned int): the input
        // holds n floats, `partial` one per block, `total` one, and each
        // launch has a float of shared memory per thread.
        unsafe {
            kernel
                .launch(
                    &stream,
                    config,
                    &[
                        (&input_device).into(),
                        (&partial).into(),
                        u32::try_from(n).expect("n fits").into(),
                    ],
                )
                .expect("first pass");
            kernel
                .launch(
                    &stream,
                    LaunchConfig {
                        grid: (1, 1, 1),
                        ..config
                    },
                    &[(&partial).into(), (&total).into(), blocks.into()],
                )
                .expect("second pass");
        }
        let sum = total.to_vec().expect("read back")[0];
        let expected: f64 = input.iter().map(|&value| f64::from(value)).sum();
        assert_close("sum", &[sum], &[expected], |_| 1e-5 * expected.abs() + 1e-6);
    }
}

const MATMUL: &str = r#"template <int TILE>
__global__ void matmul(const float* a, const float* b, float* c, int m, int n, int k) {
    __shared__ float a_tile[TILE][TILE];
    __shared__ float b_tile[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float sum = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        int a_col = t * TILE + threadIdx.x;
        int b_row = t * TILE + threadIdx.y;
        a_tile[threadIdx.y][threadIdx.x] = (row < m && a_col < k) ? a[row * k + a_col] : 0.0f;
        b_tile[threadIdx.y][threadIdx.x] = (b_row < k && col < n) ? b[b_row * n + col] : 0.0f;
        __syncthreads();
        for (int i = 0; i < TILE; ++i) sum += a_tile[threadIdx.y][i] * b_tile[i][threadIdx.x];
        __syncthreads();
    }
    if (row < m && col < n) c[row * n + col] = sum;
}
"#;

// B4
#[test]
fn b4_a_tiled_template_matmul_matches_the_cpu() {
    let Some(target) = on_device("B4 matmul") else {
        return;
    };
    const TILE: u32 = 16;
    let matmul = CudaKernel::builder(
        KernelId::named("tests.matmul").parameter(&TILE),
        "matmul<16>",
    )
    .options(CudaOptions::default().max_registers(64))
    .source(MATMUL);
    let (device, kernel) = load(target, &matmul);
    let stream = device.context().new_stream().expect("a stream");
    let mut random = Random::fresh("matmul");
    // Sizes that are not multiples of the tile, so the edges are exercised.
    for (m, n, k) in [(1usize, 1usize, 1usize), (200, 136, 72), (257, 129, 300)] {
        let a = random.signed(m * k);
        let b = random.signed(k * n);
        let a_device = device.upload(&a).expect("upload");
        let b_device = device.upload(&b).expect("upload");
        let mut c: DeviceBuffer<f32> = device.alloc(m * n).expect("alloc");
        c.copy_from_host(&vec![f32::NAN; m * n]).expect("poison");
        let config = LaunchConfig {
            grid: ((n as u32).div_ceil(TILE), (m as u32).div_ceil(TILE), 1),
            block: (TILE, TILE, 1),
            shared_memory_bytes: 0,
        };
        let dimension = |value: usize| KernelArgument::from(i32::try_from(value).expect("fits"));
        // SAFETY: matmul<16>(const float*, const float*, float*, int, int,
        // int) with a m×k, b k×n and c m×n.
        unsafe {
            kernel.launch(
                &stream,
                config,
                &[
                    (&a_device).into(),
                    (&b_device).into(),
                    (&c).into(),
                    dimension(m),
                    dimension(n),
                    dimension(k),
                ],
            )
        }
        .expect("launch");
        let result = c.to_vec().expect("read back");
        let mut expected = vec![0.0f64; m * n];
        let mut magnitude = vec![0.0f64; m * n];
        for row in 0..m {
            for col in 0..n {
                for inner in 0..k {
                    let product = f64::from(a[row * k + inner]) * f64::from(b[inner * n + col]);
                    expected[row * n + col] += product;
                    magnitude[row * n + col] += product.abs();
                }
            }
        }
        // Each output sums k rounded products: bound the error by the sum
        // of their magnitudes rather than by the (possibly cancelled) value.
        assert_close("c", &result, &expected, |index| {
            1e-4 * magnitude[index] + 1e-6
        });
    }
}

/// The cubin's header with its machine and flags fields overwritten: an
/// image whose tables are intact but which is for no GPU.
fn damage_cubin(cubin: &mut [u8]) {
    cubin[0x12] = 0;
    cubin[0x13] = 0;
    for byte in &mut cubin[0x30..0x34] {
        *byte = 0xff;
    }
}

/// An architecture whose cubins a device of `architecture` never runs:
/// another major version.
fn foreign_to(architecture: Architecture) -> Architecture {
    if architecture.major < 10 {
        Architecture::new(10, 0)
    } else {
        Architecture::new(architecture.major - 1, 0)
    }
}

/// Launches saxpy's `kernel` on three elements and checks its numbers.
fn check_saxpy_of_three(device: &kiln_cuda::CudaDevice, kernel: &LoadedKernel) {
    let stream = device.context().new_stream().expect("a stream");
    let x = device.upload(&[1.0f32, 2.0, 3.0]).expect("upload");
    let y = device.upload(&[10.0f32, 20.0, 30.0]).expect("upload");
    let out: DeviceBuffer<f32> = device.upload(&[f32::NAN; 3]).expect("upload");
    // SAFETY: saxpy's parameters, with buffers of 3 floats.
    unsafe {
        kernel.launch(
            &stream,
            LaunchConfig::for_elements(3, 32),
            &[
                2.0f32.into(),
                (&x).into(),
                (&y).into(),
                (&out).into(),
                3i32.into(),
            ],
        )
    }
    .expect("launch");
    assert_eq!(out.to_vec().expect("read back"), [12.0, 24.0, 36.0]);
}

/// A target on GPU 0, its device, and saxpy's id and artifact compiled for
/// it outside a loader; or `None` after printing why `what` skips.
fn compiled_saxpy(
    what: &str,
) -> Option<(
    CudaTarget,
    CudaDevice,
    ArtifactId<CudaVariant>,
    CudaArtifact,
)> {
    let target = on_device(what)?;
    let device = target.device().expect("a device").clone();
    let saxpy = fixed("tests.saxpy", "saxpy", support::SAXPY);
    let id = id_on(&target, &saxpy);
    let artifact = support::compile(&target, &saxpy)
        .expect("saxpy compiles")
        .artifact;
    Some((target, device, id, artifact))
}

// L9, B1
#[test]
fn l9_a_cubin_the_device_refuses_falls_back_to_its_ptx() {
    let Some((mut target, device, id, mut artifact)) = compiled_saxpy("L9 PTX fallback") else {
        return;
    };
    // The same kernel's cubin for an architecture of another major
    // version, which the driver refuses on this device whatever its
    // version; the PTX stays this device's.
    let foreign = foreign_to(device.architecture());
    let elsewhere = CudaKernel::builder(KernelId::named("tests.saxpy.foreign"), "saxpy")
        .options(CudaOptions::default().architecture(foreign))
        .source(support::SAXPY);
    artifact.cubin = support::compile(&target, &elsewhere)
        .unwrap_or_else(|error| panic!("saxpy compiles for {foreign}: {error}"))
        .artifact
        .cubin;
    let kernel = target
        .load(&id, &artifact)
        .expect("the driver refuses the cubin and loads the PTX");
    assert_eq!(
        kernel.image(),
        LoadedImage::Ptx,
        "a cubin for {foreign} does not run on {}",
        device.architecture()
    );
    let refusal = kernel
        .cubin_refusal()
        .expect("the cubin's refusal is kept on the kernel");
    kiln_test_support::say(&format!(
        "L9: the driver refused the {foreign} cubin ({refusal}) and loaded the PTX"
    ));
    // The PTX is the same kernel: its numbers are saxpy's.
    check_saxpy_of_three(&device, &kernel);
}

// L9, B1
#[test]
fn l9_a_damaged_cubin_is_never_loaded_as_it_is() {
    let Some((mut target, device, id, mut artifact)) = compiled_saxpy("L9 damaged cubin") else {
        return;
    };
    damage_cubin(&mut artifact.cubin);
    // A driver may read a header for no machine as a refusal or take the
    // image anyway; kiln must never hand the damaged cubin on as loaded:
    // either its PTX runs, or the load is a refusal with the driver's code.
    match target.load(&id, &artifact) {
        Ok(kernel) => {
            assert_eq!(
                kernel.image(),
                LoadedImage::Ptx,
                "the driver must not take a cubin for no machine"
            );
            assert!(kernel.cubin_refusal().is_some());
            check_saxpy_of_three(&device, &kernel);
        }
        Err(refusal) => assert!(refusal.code.is_some(), "{refusal}"),
    }

    // With its PTX damaged too, nothing is left to load: a refusal, never a
    // crash.
    artifact.ptx = ".version 1.0\n.target sm_1\nthis is not PTX\n".into();
    let refusal = target
        .load(&id, &artifact)
        .expect_err("neither image loads");
    assert!(
        refusal.code.is_some(),
        "the driver's code is kept: {refusal}"
    );
}

// L9, L6
#[test]
fn l9_a_kernel_the_driver_refuses_fails_alone() {
    let Some(target) = on_device("L9 driver refusal") else {
        return;
    };
    let newer = CudaKernel::builder(KernelId::named("tests.newer"), "saxpy")
        .options(CudaOptions::default().architecture(kiln_cuda::Architecture::new(10, 0)))
        .source(support::SAXPY);
    let good = fixed("tests.saxpy", "saxpy", support::SAXPY);
    let mut loader = loader(target);
    let variant = loader.target().variant();
    loader.enqueue(Box::new(newer.clone()), variant);
    loader.enqueue(Box::new(good.clone()), variant);
    loader.compile_queued();
    let batch = &loader.records()[0];
    assert_eq!(batch.count(KernelOutcome::Refused), 1, "{batch:?}");
    assert!(loader.is_loaded(&id_on(loader.target(), &good)));
    let error = loader
        .load(&newer, &id_on(loader.target(), &newer))
        .expect_err("the driver refuses sm_100 code on an older device");
    assert_eq!(error.stage, Stage::Load);
    let Failure::Refused(refusal) = &error.failure else {
        panic!("a refusal: {error}");
    };
    assert!(refusal.code.is_some(), "{refusal}");
    eprintln!("{error}");
}

// B1
#[test]
fn b1_clones_share_one_module_that_outlives_the_loader() {
    let Some(target) = on_device("B1 module lifetime") else {
        return;
    };
    let fill = support::distinct(7);
    let (device, kernel) = load(target, &fill);
    let stream = device.context().new_stream().expect("a stream");
    let clones: Vec<LoadedKernel> = (0..8).map(|_| kernel.clone()).collect();
    drop(kernel);
    let out: DeviceBuffer<f32> = device.upload(&[f32::NAN; 64]).expect("upload");
    for clone in &clones {
        // SAFETY: fill(float*, int) with a buffer of 64 floats.
        unsafe {
            clone.launch(
                &stream,
                LaunchConfig::for_elements(64, 64),
                &[(&out).into(), 64i32.into()],
            )
        }
        .expect("a clone launches after the loader and the first handle are gone");
    }
    assert!(
        out.to_vec()
            .expect("read back")
            .iter()
            .all(|&value| value == 7.0)
    );
    drop(clones);
    device
        .synchronize()
        .expect("the device is healthy after the module unloaded");
    assert_eq!(fill.id(), support::distinct(7).id());
}
