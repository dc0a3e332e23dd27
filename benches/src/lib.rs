//! What kiln's criterion benchmarks share: the CUDA kernels they compile,
//! the plain NVRTC loop they compare against, and the records they leave for
//! `cargo xtask bench-report`.
//!
//! The benchmarks themselves live in `benches/`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use kiln_cuda::{Architecture, CudaKernel, CudaOptions, CudaTarget};
use serde::{Deserialize, Serialize};

/// The variable naming the file the benchmarks append their records to.
pub const RECORDS_VARIABLE: &str = "KILN_BENCH_RECORDS";

/// The architecture the compile benchmarks build for when no GPU is here:
/// the H200's.
pub const BENCH_ARCHITECTURE: Architecture = Architecture::new(9, 0);

/// The three kernel sizes of `batch_compile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelSize {
    /// An elementwise `y = a·x + c`: NVRTC's fixed cost per program.
    Tiny,
    /// A 16×16 shared-memory tiled GEMM template, `matmul<16>`.
    Gemm,
    /// A templated register-blocked GEMM with a compile-time polynomial
    /// epilogue, fully unrolled: what autotuning candidates look like.
    Heavy,
}

impl KernelSize {
    /// Every size, smallest first.
    pub const ALL: [Self; 3] = [Self::Tiny, Self::Gemm, Self::Heavy];

    /// Its name in bench ids and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tiny => "tiny",
            Self::Gemm => "gemm",
            Self::Heavy => "heavy",
        }
    }

    /// The size called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|size| size.name() == name.trim())
    }

    /// The entry point's name expression.
    pub fn entry(self) -> &'static str {
        match self {
            Self::Tiny => "axpb",
            Self::Gemm => "matmul<16>",
            Self::Heavy => "blocked_gemm<float, 64, 8, 24>",
        }
    }

    /// The options it compiles with.
    pub fn options(self) -> CudaOptions {
        match self {
            Self::Tiny => CudaOptions::default(),
            Self::Gemm | Self::Heavy => CudaOptions::default().max_registers(128),
        }
    }

    /// The source of kernel `salt`: every salt gives a distinct text (so no
    /// two kernels share an artifact) of the same cost.
    pub fn source(self, salt: u64) -> String {
        format!("#define KILN_BENCH_SALT {salt}.0f\n{}", self.template())
    }

    /// The text without its salt: `KILN_BENCH_SALT` is left for a define
    /// to give (`-DKILN_BENCH_SALT=3`), as a file `kiln warm` specializes.
    pub fn template(self) -> &'static str {
        match self {
            Self::Tiny => TINY,
            Self::Gemm => GEMM,
            Self::Heavy => HEAVY,
        }
    }

    /// Kernel `salt` of this size, as kiln compiles it.
    pub fn kernel(self, salt: u64) -> CudaKernel {
        CudaKernel::builder(
            kiln_engine::KernelId::named("kiln.bench")
                .parameter(self.name())
                .parameter(&salt),
            self.entry(),
        )
        .options(self.options())
        .source(self.source(salt))
    }
}

const TINY: &str = r#"
extern "C" __global__ void axpb(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + KILN_BENCH_SALT;
}
"#;

const GEMM: &str = r#"
template <int TILE>
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
    if (row < m && col < n) c[row * n + col] = sum + KILN_BENCH_SALT;
}
"#;

const HEAVY: &str = r#"
template <int N> struct Horner {
    __device__ __forceinline__ static float eval(float x) {
        return Horner<N - 1>::eval(x) * x + (float)((N * 7919) % 13) * 0.125f;
    }
};
template <> struct Horner<0> {
    __device__ __forceinline__ static float eval(float) { return 1.0f; }
};

template <typename T, int BLOCK, int THREAD, int DEGREE>
__global__ void blocked_gemm(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                             int m, int n, int k) {
    constexpr int STEP = 8;
    constexpr int LANES = BLOCK / THREAD;
    __shared__ T a_tile[STEP][BLOCK];
    __shared__ T b_tile[STEP][BLOCK];
    T acc[THREAD][THREAD];
#pragma unroll
    for (int i = 0; i < THREAD; ++i)
#pragma unroll
        for (int j = 0; j < THREAD; ++j) acc[i][j] = T(0);
    const int tx = threadIdx.x % LANES;
    const int ty = threadIdx.x / LANES;
    const int row0 = blockIdx.y * BLOCK;
    const int col0 = blockIdx.x * BLOCK;
    for (int t = 0; t < k; t += STEP) {
        for (int e = threadIdx.x; e < STEP * BLOCK; e += LANES * LANES) {
            int s = e / BLOCK, q = e % BLOCK;
            a_tile[s][q] = (row0 + q < m && t + s < k) ? a[(row0 + q) * k + t + s] : T(0);
            b_tile[s][q] = (t + s < k && col0 + q < n) ? b[(t + s) * n + col0 + q] : T(0);
        }
        __syncthreads();
#pragma unroll
        for (int s = 0; s < STEP; ++s) {
            T a_frag[THREAD], b_frag[THREAD];
#pragma unroll
            for (int i = 0; i < THREAD; ++i) a_frag[i] = a_tile[s][ty * THREAD + i];
#pragma unroll
            for (int j = 0; j < THREAD; ++j) b_frag[j] = b_tile[s][tx * THREAD + j];
#pragma unroll
            for (int i = 0; i < THREAD; ++i)
#pragma unroll
                for (int j = 0; j < THREAD; ++j) acc[i][j] += a_frag[i] * b_frag[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < THREAD; ++i)
#pragma unroll
        for (int j = 0; j < THREAD; ++j) {
            int row = row0 + ty * THREAD + i, col = col0 + tx * THREAD + j;
            if (row < m && col < n)
                c[row * n + col] = Horner<DEGREE>::eval(acc[i][j]) + KILN_BENCH_SALT;
        }
}
"#;

/// A CUDA target for the benchmarks: on GPU 0 when `on_device` and there is
/// one (and `KILN_BENCH_DEVICE` is not `0`), else compile-only for
/// [`BENCH_ARCHITECTURE`]. `None`, with the reason printed, when NVRTC is
/// missing.
pub fn cuda_target(bench: &str, on_device: bool) -> Option<CudaTarget> {
    let wants_device =
        on_device && std::env::var("KILN_BENCH_DEVICE").map_or(true, |value| value != "0");
    if wants_device && let Ok(target) = CudaTarget::on_device(0) {
        return Some(target);
    }
    match CudaTarget::compile_only(BENCH_ARCHITECTURE) {
        Ok(target) => Some(target),
        Err(error) => {
            eprintln!("{bench}: skipped, no NVRTC: {error}");
            None
        }
    }
}

/// Compiles kernels the plainest way: one cudarc NVRTC program after
/// another on one thread, the cubin and PTX taken, nothing else — what a
/// program without kiln does.
pub mod plain_nvrtc {
    use std::ffi::{CString, c_char};

    use cudarc::nvrtc::sys;

    use super::KernelSize;

    /// Compiles kernel `salt` of `size` for `architecture` (`sm_90`):
    /// returns the cubin's size.
    ///
    /// # Panics
    ///
    /// NVRTC is not open (call `kiln_cuda::Nvrtc::open` first) or the
    /// kernel does not compile.
    pub fn compile(size: KernelSize, salt: u64, architecture: kiln_cuda::Architecture) -> usize {
        let source = CString::new(size.source(salt)).expect("no NUL");
        let name = CString::new("plain.cu").expect("no NUL");
        let entry = CString::new(size.entry()).expect("no NUL");
        let arguments: Vec<CString> = size
            .options()
            .arguments(architecture)
            .into_iter()
            .map(|argument| CString::new(argument).expect("no NUL"))
            .collect();
        let pointers: Vec<*const c_char> = arguments.iter().map(|a| a.as_ptr()).collect();
        let mut program: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: NVRTC is open (the caller's contract); every pointer is to
        // a NUL-terminated string alive across the calls; the program is
        // destroyed once at the end.
        unsafe {
            check(sys::nvrtcCreateProgram(
                &mut program,
                source.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ));
            check(sys::nvrtcAddNameExpression(program, entry.as_ptr()));
            let count = i32::try_from(pointers.len()).expect("few options");
            check(sys::nvrtcCompileProgram(program, count, pointers.as_ptr()));
            let mut cubin_size = 0usize;
            check(sys::nvrtcGetCUBINSize(program, &mut cubin_size));
            let mut cubin = vec![0u8; cubin_size];
            check(sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast()));
            let mut ptx_size = 0usize;
            check(sys::nvrtcGetPTXSize(program, &mut ptx_size));
            let mut ptx = vec![0u8; ptx_size];
            check(sys::nvrtcGetPTX(program, ptx.as_mut_ptr().cast()));
            check(sys::nvrtcDestroyProgram(&mut program));
            std::hint::black_box(&ptx);
            cubin.len()
        }
    }

    fn check(status: sys::nvrtcResult) {
        assert_eq!(status, sys::nvrtcResult::NVRTC_SUCCESS, "NVRTC failed");
    }
}

/// One measurement a benchmark leaves for the report, as a JSON line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BenchRecord {
    /// The benchmark: `batch_compile`, `warm_start`, `compile_memory`,
    /// `shared_store`.
    pub bench: String,
    /// What was measured: `threads`, `processes`, `sequential`, ...
    pub case: String,
    /// The kernel size, when it has one.
    pub size: Option<String>,
    /// How many kernels.
    pub kernels: usize,
    /// Wall time, seconds.
    pub wall: f64,
    /// The batch's work, summed over kernels, seconds (S3).
    pub summed_work: f64,
    /// The batch's slowest kernel, seconds.
    pub slowest: f64,
    /// Workers the batch ran on.
    pub workers: usize,
    /// Threads or processes.
    pub mode: String,
    /// The machine's cores.
    pub cores: usize,
    /// Peak resident memory of the host process, bytes.
    pub host_peak_bytes: Option<u64>,
    /// Peak resident memory of each worker process, bytes.
    pub worker_peak_bytes: Vec<u64>,
    /// How many kernels it compiled, where that is the measure
    /// (`shared_store`: every kernel compiled once across the processes).
    pub compiled: Option<usize>,
    /// Anything else, as text.
    pub note: Option<String>,
}

/// The disk store at `root` as a benchmark's processes open it: durable,
/// as a program's is, and never collecting behind the measurement.
///
/// # Panics
///
/// The store does not open.
pub fn disk_store(root: &std::path::Path) -> kiln_store::DiskStore {
    kiln_store::DiskStore::open(kiln_store::StoreConfig {
        collects_automatically: false,
        ..kiln_store::StoreConfig::at(root)
    })
    .expect("the store opens")
}

/// The machine's cores, as the loader counts them.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Appends `record` to the records file (`KILN_BENCH_RECORDS`, else
/// `target/kiln-bench/records.jsonl`).
pub fn append_record(record: &BenchRecord) {
    let path = records_path();
    if let Some(folder) = path.parent() {
        drop(std::fs::create_dir_all(folder));
    }
    let line = serde_json::to_string(record).expect("a record serializes");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{line}"));
    if let Err(error) = written {
        eprintln!("could not append to {}: {error}", path.display());
    }
}

/// Where the records go.
pub fn records_path() -> PathBuf {
    if let Some(path) = std::env::var_os(RECORDS_VARIABLE) {
        return path.into();
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| "target".into(), PathBuf::from);
    target.join("kiln-bench").join("records.jsonl")
}

/// Peak resident memory (`VmHWM`) of process `pid`, bytes.
pub fn peak_resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kibibytes: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kibibytes * 1024)
}

/// A list of numbers from the environment, `16,64,256`.
pub fn counts_from_env(variable: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(variable).map_or_else(
        |_| default.to_vec(),
        |value| {
            value
                .split(',')
                .filter_map(|count| count.trim().parse().ok())
                .collect()
        },
    )
}

/// Seconds of a duration, for records.
pub fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}
