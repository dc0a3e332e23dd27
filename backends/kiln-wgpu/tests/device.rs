//! The wgpu backend on a real device (B3, B4): example kernels launched on
//! random inputs and checked against a CPU reference, a pipeline the device
//! refuses failing alone, and the driver's pipeline cache kept in the store.
//! Every test that needs the device skips with a printed reason where there
//! is no Vulkan adapter, and fails instead under `KILN_REQUIRE_DEVICE=1`.
//! What naga decides with no device is in `compile.rs`.

mod support;

use kiln_engine::{KernelId, StoreOutcome};
use kiln_wgpu::pipeline_cache::pipeline_cache_key;
use kiln_wgpu::{PipelineCacheState, WgpuDevice, WgpuPipeline, WgpuTarget, WgslKernel, wgpu};
use support::{assert_close, bytes_of, bytes_of_u32, load, read, storage, words};

// B4
#[test]
fn saxpy_matches_the_cpu_on_random_inputs() {
    let Some((device, mut random)) = support::device_and_random("saxpy") else {
        return;
    };
    for workgroup in [64.0, 256.0] {
        let kernel = support::example_kernel("saxpy.wgsl", &[("WORKGROUP", workgroup)]);
        let pipeline = load(&device, &kernel);
        assert_eq!(pipeline.workgroup_size(), [workgroup as u32, 1, 1]);
        support::check_saxpy(
            "saxpy",
            &device,
            &pipeline,
            &mut random,
            10_007,
            workgroup as u32,
        );
    }
}

// B4
#[test]
fn reduce_sum_partials_add_up_to_the_cpu_sum() {
    let Some((device, mut random)) = support::device_and_random("reduce_sum") else {
        return;
    };
    let kernel = support::example_kernel("reduce_sum.wgsl", &[("WORKGROUP", 128.0)]);
    let pipeline = load(&device, &kernel);
    let n = 100_003;
    let input = random.signed(n);
    let groups = 64;
    let input_buffer = storage(&device, &input);
    let partials = storage(&device, &vec![f32::NAN; groups]);
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &input_buffer), (0, 1, &partials)],
            [groups as u32, 1, 1],
        )
        .expect("the dispatch runs");
    let sum: f64 = read(&device, &partials, groups)
        .iter()
        .map(|partial| f64::from(*partial))
        .sum();
    let expected: f64 = input.iter().map(|value| f64::from(*value)).sum();
    assert!(
        (sum - expected).abs() < 1e-2,
        "the device's sum {sum} is the CPU's {expected}"
    );
}

// B4
#[test]
fn inclusive_scan_matches_the_cpu_within_each_block() {
    let Some((device, mut random)) = support::device_and_random("scan_inclusive") else {
        return;
    };
    let block = 128;
    let kernel = support::example_kernel("scan_inclusive.wgsl", &[("WORKGROUP", block as f64)]);
    let pipeline = load(&device, &kernel);
    let n = 5000;
    let input = random.signed(n);
    let blocks = n.div_ceil(block);
    let input_buffer = storage(&device, &input);
    let output = storage(&device, &vec![f32::NAN; n]);
    let block_sums = storage(&device, &vec![f32::NAN; blocks]);
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &input_buffer), (0, 1, &output), (0, 2, &block_sums)],
            [blocks as u32, 1, 1],
        )
        .expect("the dispatch runs");
    let mut expected = Vec::with_capacity(n);
    for chunk in input.chunks(block) {
        let mut running = 0.0f32;
        for value in chunk {
            running += value;
            expected.push(running);
        }
    }
    assert_close("scan", &read(&device, &output, n), &expected, 1e-4);
}

fn cpu_matmul(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for row in 0..m {
        for column in 0..n {
            c[row * n + column] = (0..k).map(|i| a[row * k + i] * b[i * n + column]).sum();
        }
    }
    c
}

// B4
#[test]
fn tiled_matmul_matches_the_cpu_on_ragged_shapes() {
    let Some((device, mut random)) = support::device_and_random("matmul_tiled") else {
        return;
    };
    let (m, n, k) = (67, 45, 83);
    let (a, b) = (random.signed(m * k), random.signed(k * n));
    let expected = cpu_matmul(&a, &b, m, n, k);
    for tile in [8u32, 16] {
        let kernel = support::example_kernel("matmul_tiled.wgsl", &[("TILE", f64::from(tile))]);
        let pipeline = load(&device, &kernel);
        assert_eq!(pipeline.workgroup_size(), [tile, tile, 1]);
        let dims = device
            .uniform_buffer("dims", &bytes_of_u32(&[m as u32, n as u32, k as u32]))
            .expect("a uniform");
        let (a_buffer, b_buffer) = (storage(&device, &a), storage(&device, &b));
        let c = storage(&device, &vec![f32::NAN; m * n]);
        device
            .dispatch(
                &pipeline,
                &[
                    (0, 0, &dims),
                    (0, 1, &a_buffer),
                    (0, 2, &b_buffer),
                    (0, 3, &c),
                ],
                [(n as u32).div_ceil(tile), (m as u32).div_ceil(tile), 1],
            )
            .expect("the dispatch runs");
        assert_close("matmul", &read(&device, &c, m * n), &expected, 1e-4);
    }
}

/// Runs `kernel` on `device` over `input`, a matrix of `shape` (rows,
/// columns) bound with its shape (shape, input, output), in `groups`
/// workgroups: what it wrote, as many floats as the input.
fn run_on_rows(
    device: &WgpuDevice,
    kernel: &WgslKernel,
    (rows, columns): (usize, usize),
    input: &[f32],
    groups: [u32; 3],
) -> Vec<f32> {
    let pipeline = load(device, kernel);
    let shape = device
        .uniform_buffer("shape", &bytes_of_u32(&[rows as u32, columns as u32]))
        .expect("a uniform");
    let input_buffer = storage(device, input);
    let output = storage(device, &vec![f32::NAN; rows * columns]);
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &shape), (0, 1, &input_buffer), (0, 2, &output)],
            groups,
        )
        .expect("the dispatch runs");
    read(device, &output, rows * columns)
}

// B4
#[test]
fn softmax_rows_match_the_cpu() {
    let Some((device, mut random)) = support::device_and_random("softmax") else {
        return;
    };
    let (rows, columns) = (37, 301);
    let input: Vec<f32> = random
        .signed(rows * columns)
        .iter()
        .map(|v| v * 8.0)
        .collect();
    let kernel = support::example_kernel("softmax.wgsl", &[("WORKGROUP", 64.0)]);
    let got = run_on_rows(
        &device,
        &kernel,
        (rows, columns),
        &input,
        [rows as u32, 1, 1],
    );
    let mut expected = Vec::with_capacity(rows * columns);
    for row in input.chunks(columns) {
        let max = row.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        expected.extend(row.iter().map(|v| (v - max).exp() / sum));
    }
    assert_close("softmax", &got, &expected, 1e-5);
}

// B4
#[test]
fn transpose_matches_the_cpu() {
    let Some((device, mut random)) = support::device_and_random("transpose") else {
        return;
    };
    let (rows, columns) = (53, 29);
    let input = random.signed(rows * columns);
    let kernel = support::example_kernel("transpose.wgsl", &[("TILE", 16.0)]);
    let groups = [(columns as u32).div_ceil(16), (rows as u32).div_ceil(16), 1];
    let got = run_on_rows(&device, &kernel, (rows, columns), &input, groups);
    let mut expected = vec![0.0; rows * columns];
    for row in 0..rows {
        for column in 0..columns {
            expected[column * rows + row] = input[row * columns + column];
        }
    }
    assert_close("transpose", &got, &expected, 0.0);
}

// B4
#[test]
fn conv1d_matches_the_cpu() {
    let Some((device, mut random)) = support::device_and_random("conv1d") else {
        return;
    };
    let radius = 2usize;
    let n = 1000;
    let input = random.signed(n);
    let weights = random.signed(2 * radius + 1);
    let kernel = support::example_kernel("conv1d.wgsl", &[("RADIUS", radius as f64)]);
    let pipeline = load(&device, &kernel);
    let (input_buffer, weight_buffer) = (storage(&device, &input), storage(&device, &weights));
    let output = storage(&device, &vec![f32::NAN; n]);
    device
        .dispatch(
            &pipeline,
            &[
                (0, 0, &input_buffer),
                (0, 1, &weight_buffer),
                (0, 2, &output),
            ],
            [(n as u32).div_ceil(64), 1, 1],
        )
        .expect("the dispatch runs");
    let expected: Vec<f32> = (0..n)
        .map(|i| {
            (0..=2 * radius)
                .filter_map(|t| {
                    let at = (i + t).checked_sub(radius)?;
                    input.get(at).map(|value| weights[t] * value)
                })
                .sum()
        })
        .collect();
    assert_close("conv1d", &read(&device, &output, n), &expected, 1e-5);
}

// B4
#[test]
fn histogram_counts_every_value_once() {
    let Some((device, mut random)) = support::device_and_random("histogram") else {
        return;
    };
    let bins = 16usize;
    let n = 4099;
    let input: Vec<f32> = (0..n).map(|_| random.unit()).collect();
    let kernel = support::example_kernel("histogram.wgsl", &[("BINS", bins as f64)]);
    let pipeline = load(&device, &kernel);
    let input_buffer = storage(&device, &input);
    let counts = device
        .storage_buffer("bins", &bytes_of_u32(&vec![0; bins]))
        .expect("a storage buffer");
    device
        .dispatch(
            &pipeline,
            &[(0, 0, &input_buffer), (0, 1, &counts)],
            [(n as u32).div_ceil(64), 1, 1],
        )
        .expect("the dispatch runs");
    let mut expected = vec![0u32; bins];
    for value in &input {
        expected[((value * bins as f32) as usize).min(bins - 1)] += 1;
    }
    let got = words(&device.read(&counts).expect("the bins read back"));
    assert_eq!(got, expected);
}

// L9, B3
#[test]
fn a_pipeline_the_device_rejects_fails_alone_and_the_device_goes_on() {
    let Some(device) = support::device("device refusal") else {
        return;
    };
    let mut loader = support::loader(WgpuTarget::on_device(device.clone()));
    let too_big = WgslKernel::builder(KernelId::named("tests.too_big"), "main")
        .source("@compute @workgroup_size(1024, 1024, 1) fn main() {}");
    let good = support::example_kernel("relu.wgsl", &[("WORKGROUP", 64.0)]);
    loader.enqueue(Box::new(too_big.clone()), kiln_wgpu::WgpuVariant);
    loader.enqueue(Box::new(good.clone()), kiln_wgpu::WgpuVariant);
    loader.compile_queued();
    let error = loader
        .load(&too_big, &support::id_of(&too_big))
        .expect_err("no device takes a million invocations per workgroup");
    assert!(error.to_string().contains("refused"), "{error}");
    let pipeline = loader
        .load(&good, &support::id_of(&good))
        .expect("the rest of the batch loaded");
    let data = storage(&device, &[-1.0, 2.0]);
    device
        .dispatch(&pipeline, &[(0, 0, &data)], [1, 1, 1])
        .expect("the device still runs kernels");
    assert_eq!(read(&device, &data, 2), [0.0, 2.0]);
}

// B3
#[test]
fn the_pipeline_cache_round_trips_through_the_store() {
    let Some(device) = support::device("pipeline cache") else {
        return;
    };
    if !device.has_pipeline_cache() {
        kiln_engine::conformance::skip(
            "the pipeline cache round trip",
            &format!("{} has no Features::PIPELINE_CACHE", device.describe()),
        );
        return;
    }
    let folder = support::fresh_folder("pipeline-cache");
    let kernels: Vec<WgslKernel> = (0..4).map(support::distinct).collect();

    let first = WgpuTarget::on_device(device.clone()).with_store(support::store_at(&folder));
    assert_eq!(first.pipeline_cache_state(), &PipelineCacheState::Empty);
    let mut loader = support::loader(first);
    for kernel in &kernels {
        loader.enqueue(Box::new(kernel.clone()), kiln_wgpu::WgpuVariant);
    }
    loader.compile_queued();
    drop(loader);

    let store = support::store_at(&folder);
    let key = pipeline_cache_key(&device).expect("a cache key");
    let stored = match store.parts().lookup_blob(&key) {
        kiln_engine::Lookup::Hit { artifact, .. } => artifact,
        kiln_engine::Lookup::Miss(miss) => panic!("the batch stored its pipeline cache: {miss}"),
    };
    assert!(!stored.is_empty());

    let second = WgpuTarget::on_device(device.clone()).with_store(store);
    assert_eq!(
        second.pipeline_cache_state(),
        &PipelineCacheState::Loaded {
            bytes: stored.len() as u64
        }
    );
    let mut loader = support::loader(second);
    for kernel in &kernels {
        loader
            .load(kernel, &support::id_of(kernel))
            .expect("a stored kernel loads through the stored cache");
    }
}

// B3, P2
#[test]
fn invalid_pipeline_cache_data_falls_back_to_an_empty_cache() {
    let Some(device) = support::device("pipeline cache fallback") else {
        return;
    };
    let Some(key) = pipeline_cache_key(&device) else {
        kiln_engine::conformance::skip(
            "the pipeline cache fallback",
            &format!("{} has no Features::PIPELINE_CACHE", device.describe()),
        );
        return;
    };
    let store = support::fresh_store("pipeline-cache-garbage");
    let garbage = b"not a pipeline cache, but verified bytes in the store".to_vec();
    assert!(matches!(
        store.parts().put_blob(&key, &garbage),
        StoreOutcome::Stored { .. }
    ));
    let target = WgpuTarget::on_device(device.clone()).with_store(store.clone());
    assert!(
        matches!(
            target.pipeline_cache_state(),
            PipelineCacheState::Rejected { .. }
        ),
        "{}",
        target.pipeline_cache_state()
    );
    let mut loader = support::loader(target);
    let kernel = support::distinct(99);
    loader
        .load(&kernel, &support::id_of(&kernel))
        .expect("pipelines are made through the empty cache");
    drop(loader);
    match store.parts().lookup_blob(&key) {
        kiln_engine::Lookup::Hit { artifact, .. } => {
            assert_ne!(artifact, garbage, "the next save replaced the bad blob");
        }
        kiln_engine::Lookup::Miss(miss) => panic!("a cache was stored: {miss}"),
    }
}

// B3
#[test]
fn a_compile_only_store_serves_the_device_without_compiling() {
    let Some(device) = support::device("compile-only store") else {
        return;
    };
    let folder = support::fresh_folder("compile-only-store");
    let kernel = support::example_kernel("gelu.wgsl", &[("WORKGROUP", 256.0)]);
    let mut compile_only =
        support::loader(WgpuTarget::compile_only().with_store(support::store_at(&folder)));
    let described = compile_only
        .load(&kernel, &support::id_of(&kernel))
        .expect("naga compiles it");
    assert!(!described.is_on_device());
    drop(compile_only);
    let mut on_device =
        support::loader(WgpuTarget::on_device(device).with_store(support::store_at(&folder)));
    let loaded = on_device
        .load(&kernel, &support::id_of(&kernel))
        .expect("the stored artifact loads");
    assert!(loaded.is_on_device());
    assert_eq!(on_device.statistics().hits, 1);
    assert_eq!(on_device.statistics().compiled, 0);
}

// B5
#[test]
fn b5_a_loaded_pipeline_runs_in_the_programs_own_command_encoder() {
    let Some(opened) = support::device("B5 the program's own encoder") else {
        return;
    };
    // The program's own device and queue, handed to kiln.
    let device = WgpuDevice::new(opened.device().clone(), opened.queue().clone());
    let kernel = support::distinct(3);
    let pipeline = load(&device, &kernel);
    assert_eq!(
        pipeline.bind_group_layouts().len(),
        1,
        "one bind group, as the shader declares"
    );
    let missing = pipeline.bind_group_layout(1);
    assert!(
        matches!(
            missing,
            Err(kiln_wgpu::Error::NoSuchGroup {
                group: 1,
                groups: 1,
                ..
            })
        ),
        "{missing:?}"
    );

    let n = 1000usize;
    let input: Vec<f32> = (0..n).map(|index| index as f32).collect();
    let wgpu_device = device.device();
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let size = (n * 4) as u64;
    let data = wgpu_device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("program data"),
        size,
        usage,
        mapped_at_creation: false,
    });
    let copy = wgpu_device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("program copy"),
        size,
        usage,
        mapped_at_creation: false,
    });
    device.queue().write_buffer(&data, 0, &bytes_of(&input));
    let bind_group = wgpu_device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("program bind group"),
        layout: pipeline.bind_group_layout(0).expect("group 0 exists"),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: data.as_entire_binding(),
        }],
    });
    // Two dispatches and a copy in one encoder of the program's: each runs
    // after the one before it.
    let mut encoder = wgpu_device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("program encoder"),
    });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("program pass"),
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline.pipeline().expect("loaded on a device"));
        pass.set_bind_group(0, &bind_group, &[]);
        let groups = (n as u32).div_ceil(pipeline.workgroup_size()[0]);
        pass.dispatch_workgroups(groups, 1, 1);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    encoder.copy_buffer_to_buffer(&data, 0, &copy, 0, size);
    device.queue().submit([encoder.finish()]);

    let expected: Vec<f32> = input.iter().map(|x| (x * 2.0 + 3.0) * 2.0 + 3.0).collect();
    assert_eq!(read(&device, &copy, n), expected);
}

/// WGSL whose constant is declared with a number, as real kernels do.
const GAIN_BY_ID: &str = "@id(1300) override gain: f32 = 1.0;\n\
    @group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
    @compute @workgroup_size(64)\n\
    fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
    \x20   if id.x < arrayLength(&data) { data[id.x] = data[id.x] * gain; }\n\
    }\n";

// B6: an `@id(1300)` override is set by its number or by its name, and the
// pipeline gets the value either way.
#[test]
fn an_override_declared_with_an_id_is_set_by_number_or_name() {
    let Some(device) = support::device("@id overrides") else {
        return;
    };
    for (key, value) in [("1300", 1.5f32), ("gain", -3.0)] {
        let kernel = WgslKernel::builder(KernelId::named("tests.gain").parameter(key), "main")
            .constant(key, f64::from(value))
            .source(GAIN_BY_ID);
        let pipeline = load(&device, &kernel);
        let input: Vec<f32> = (0..200).map(|index| index as f32).collect();
        let data = storage(&device, &input);
        device
            .dispatch(&pipeline, &[(0, 0, &data)], [4, 1, 1])
            .expect("the dispatch runs");
        let expected: Vec<f32> = input.iter().map(|x| x * value).collect();
        assert_eq!(read(&device, &data, input.len()), expected, "{key}={value}");
    }
}

/// One WGSL file of two compute entry points (and a vertex one).
const PASSES: &str = "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
    @compute @workgroup_size(64)\n\
    fn forward(@builtin(global_invocation_id) id: vec3<u32>) {\n\
    \x20   if id.x < arrayLength(&data) { data[id.x] = data[id.x] * 2.0 + 1.0; }\n\
    }\n\
    @vertex fn draw() -> @builtin(position) vec4<f32> { return vec4<f32>(); }\n\
    @compute @workgroup_size(32)\n\
    fn backward(@builtin(global_invocation_id) id: vec3<u32>) {\n\
    \x20   if id.x < arrayLength(&data) { data[id.x] = (data[id.x] - 1.0) * 0.5; }\n\
    }\n";

// B6: every @compute entry of one WGSL text is a kernel, loaded by name.
#[test]
fn every_compute_entry_of_one_wgsl_file_loads_by_name_and_runs() {
    let Some(device) = support::device("WGSL entries") else {
        return;
    };
    let entries = kiln_wgpu::compute_entries(PASSES).expect("the file parses");
    assert_eq!(entries, ["forward", "backward"]);
    let pipelines: Vec<WgpuPipeline> = entries
        .iter()
        .map(|entry| {
            load(
                &device,
                &WgslKernel::builder(KernelId::named("tests.passes"), entry.as_str())
                    .label("passes.wgsl")
                    .source(PASSES),
            )
        })
        .collect();
    assert_eq!(pipelines[0].workgroup_size(), [64, 1, 1]);
    assert_eq!(pipelines[1].workgroup_size(), [32, 1, 1]);
    let input: Vec<f32> = (0..500).map(|index| index as f32 * 0.5 - 100.0).collect();
    let data = storage(&device, &input);
    device
        .dispatch(&pipelines[0], &[(0, 0, &data)], [8, 1, 1])
        .expect("forward runs");
    let forward: Vec<f32> = input.iter().map(|x| x * 2.0 + 1.0).collect();
    assert_eq!(read(&device, &data, input.len()), forward);
    device
        .dispatch(&pipelines[1], &[(0, 0, &data)], [16, 1, 1])
        .expect("backward runs");
    assert_eq!(read(&device, &data, input.len()), input);
}
