//! What `kiln show` reads out of a stored value, by backend: the recipe
//! kept after the artifact (the compiler's arguments or constants, the
//! kernel's source) and the artifact in forms people read: CUDA's PTX and,
//! through the CUDA toolkit's `cuobjdump` or `nvdisasm` when one is found,
//! its SASS; a HIP code object's instructions through ROCm's
//! `llvm-objdump` (or one on `PATH`); a wgpu kernel's validated WGSL, or
//! its SPIR-V through `spirv-dis` when found. The raw bytes are the cubin,
//! the code object, the WGSL text or the SPIR-V module.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kiln_cuda::{CudaArtifact, CudaLowered};
use kiln_engine::store::decode_value;
use kiln_hip::{HipArtifact, HipLowered};
use kiln_wgpu::{ShaderCode, WgpuArtifact, WgpuLowered};

/// The longest a disassembler may run before it is stopped.
const TOOL_DEADLINE: Duration = Duration::from_secs(30);

/// One readable form of a stored kernel: a part of its recipe or of its
/// artifact.
#[derive(Debug, Clone)]
pub struct Form {
    /// What it is: `PTX`, `SASS (cuobjdump)`, `NVRTC arguments`.
    pub name: String,
    /// Its text, or why it cannot be shown here.
    pub text: Result<String, String>,
}

impl Form {
    fn text(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: Ok(text.into()),
        }
    }
}

/// What a stored value of one backend holds, readable and raw.
#[derive(Debug)]
pub struct Shown {
    /// The recipe's parts; empty for a value kept without a recipe.
    pub recipe: Vec<Form>,
    /// The artifact's forms.
    pub artifact: Vec<Form>,
    /// The artifact's own bytes, as a device or a tool takes them.
    pub raw: Vec<u8>,
    /// What the raw bytes are: `cubin`, `code object`, `WGSL`, `SPIR-V`.
    pub raw_kind: &'static str,
}

/// The stored value `bytes` of `backend`, read; why not when its bytes are
/// no value of that backend (or the backend is none this command knows).
pub fn read(backend: &str, bytes: &[u8]) -> Result<Shown, String> {
    match backend {
        "cuda" => cuda(bytes),
        "hip" => hip(bytes),
        "wgpu" => wgpu(bytes),
        other => Err(format!("no reader for the `{other}` backend's artifacts")),
    }
}

fn cuda(bytes: &[u8]) -> Result<Shown, String> {
    let value = decode_value::<CudaArtifact>(bytes)?;
    let artifact = value.artifact;
    let mut recipe = Vec::new();
    if let Some(lowered) = value
        .recipe
        .and_then(|recipe| recipe.lowered_as::<CudaLowered>())
    {
        recipe.push(Form::text("NVRTC arguments", lowered.arguments().join(" ")));
        recipe.push(Form::text("source", lowered.source()));
    }
    let sass = disassemble(
        &[
            Tool::cuda("cuobjdump", &["-sass"]),
            Tool::cuda("nvdisasm", &[]),
        ],
        &artifact.cubin,
        "cubin",
    );
    let forms = vec![
        Form::text(format!("PTX ({})", artifact.architecture), artifact.ptx),
        match sass {
            Ok((tool, text)) => Form::text(format!("SASS ({tool})"), text),
            Err(why) => Form {
                name: "SASS".into(),
                text: Err(why),
            },
        },
    ];
    Ok(Shown {
        recipe,
        artifact: forms,
        raw: artifact.cubin,
        raw_kind: "cubin",
    })
}

fn hip(bytes: &[u8]) -> Result<Shown, String> {
    let value = decode_value::<HipArtifact>(bytes)?;
    let artifact = value.artifact;
    let mut recipe = Vec::new();
    if let Some(lowered) = value
        .recipe
        .and_then(|recipe| recipe.lowered_as::<HipLowered>())
    {
        recipe.push(Form::text(
            "hipRTC options",
            format!("{:?}", lowered.options()),
        ));
        recipe.push(Form::text("source", lowered.source()));
    }
    let mcpu = format!("--mcpu={}", artifact.architecture.as_str());
    let arguments = ["-d", "--triple=amdgcn-amd-amdhsa", mcpu.as_str()];
    let isa = disassemble(
        &[Tool::rocm("llvm-objdump", &arguments)],
        &artifact.code_object,
        "co",
    );
    let forms = vec![match isa {
        Ok((tool, text)) => Form::text(format!("{} ISA ({tool})", artifact.architecture), text),
        Err(why) => Form {
            name: format!("{} ISA", artifact.architecture),
            text: Err(why),
        },
    }];
    Ok(Shown {
        recipe,
        artifact: forms,
        raw: artifact.code_object,
        raw_kind: "code object",
    })
}

fn wgpu(bytes: &[u8]) -> Result<Shown, String> {
    let value = decode_value::<WgpuArtifact>(bytes)?;
    let artifact = value.artifact;
    let mut recipe = Vec::new();
    if let Some(lowered) = value
        .recipe
        .and_then(|recipe| recipe.lowered_as::<WgpuLowered>())
    {
        recipe.push(Form::text(
            "constants",
            format!("{:?}", lowered.constants()),
        ));
    }
    if !artifact.required_features.is_empty() {
        recipe.push(Form::text(
            "features",
            artifact.required_features.join(", "),
        ));
    }
    let (forms, raw, raw_kind) = match artifact.code {
        ShaderCode::Wgsl(text) => (
            vec![Form::text(
                format!("WGSL (entry {})", artifact.entry),
                text.clone(),
            )],
            text.into_bytes(),
            "WGSL",
        ),
        ShaderCode::Spirv(module) => {
            let form = match disassemble(&[Tool::path("spirv-dis", &[])], &module, "spv") {
                Ok((tool, text)) => Form::text(format!("SPIR-V ({tool})"), text),
                Err(why) => Form {
                    name: "SPIR-V".into(),
                    text: Err(why),
                },
            };
            (vec![form], module, "SPIR-V")
        }
    };
    Ok(Shown {
        recipe,
        artifact: forms,
        raw,
        raw_kind,
    })
}

/// A disassembler: its program's name, where besides `PATH` it is looked
/// for, and its arguments before the file.
struct Tool {
    program: &'static str,
    folders: Vec<PathBuf>,
    arguments: Vec<String>,
}

impl Tool {
    /// A tool of the CUDA toolkit: `CUDA_HOME`'s or `CUDA_PATH`'s `bin`,
    /// the usual install folder, then `PATH`.
    fn cuda(program: &'static str, arguments: &[&str]) -> Self {
        Self::with_homes(
            program,
            arguments,
            &["CUDA_HOME", "CUDA_PATH"],
            "bin",
            "/usr/local/cuda",
        )
    }

    /// A tool of ROCm: `ROCM_PATH`'s `llvm/bin`, the usual install folder,
    /// then `PATH`.
    fn rocm(program: &'static str, arguments: &[&str]) -> Self {
        Self::with_homes(program, arguments, &["ROCM_PATH"], "llvm/bin", "/opt/rocm")
    }

    /// A tool found on `PATH` only.
    fn path(program: &'static str, arguments: &[&str]) -> Self {
        Self::with_homes(program, arguments, &[], "", "")
    }

    fn with_homes(
        program: &'static str,
        arguments: &[&str],
        variables: &[&str],
        below: &str,
        usual: &str,
    ) -> Self {
        let mut folders: Vec<PathBuf> = variables
            .iter()
            .filter_map(std::env::var_os)
            .map(|home| PathBuf::from(home).join(below))
            .collect();
        if !usual.is_empty() {
            folders.push(Path::new(usual).join(below));
        }
        folders.extend(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        );
        Self {
            program,
            folders,
            arguments: arguments
                .iter()
                .map(|&argument| argument.to_owned())
                .collect(),
        }
    }

    /// The program's file, where found.
    fn found(&self) -> Option<PathBuf> {
        self.folders
            .iter()
            .map(|folder| folder.join(self.program))
            .find(|file| file.is_file())
    }
}

/// The first of `tools` found, run on `bytes` written to a temporary file
/// ending in `suffix`: its name and its output; why none could when none
/// was found or each failed.
fn disassemble(
    tools: &[Tool],
    bytes: &[u8],
    suffix: &str,
) -> Result<(&'static str, String), String> {
    let found: Vec<(&Tool, PathBuf)> = tools
        .iter()
        .filter_map(|tool| tool.found().map(|file| (tool, file)))
        .collect();
    if found.is_empty() {
        let names: Vec<&str> = tools.iter().map(|tool| tool.program).collect();
        return Err(format!(
            "{} not found: install it to see this form (the raw bytes: --raw)",
            names.join(" or ")
        ));
    }
    static FILES: AtomicU32 = AtomicU32::new(0);
    let file = std::env::temp_dir().join(format!(
        "kiln-show-{}-{}.{suffix}",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, bytes).map_err(|error| format!("writing a temporary file: {error}"))?;
    let mut failures = Vec::new();
    let mut result = None;
    for (tool, program) in found {
        match run(&program, &tool.arguments, &file) {
            Ok(text) => {
                result = Some((tool.program, text));
                break;
            }
            Err(why) => failures.push(format!("{}: {why}", tool.program)),
        }
    }
    let _ = std::fs::remove_file(&file);
    result.ok_or_else(|| failures.join("; "))
}

/// Runs `program` with `arguments` and `file`, within [`TOOL_DEADLINE`]:
/// its standard output, or why it failed.
fn run(program: &Path, arguments: &[String], file: &Path) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(arguments)
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| error.to_string())?;
    // Read on threads, so a long output never fills a pipe while we wait.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TOOL_DEADLINE => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "still running after {} s, stopped",
                    TOOL_DEADLINE.as_secs()
                ));
            }
            Err(error) => return Err(error.to_string()),
        }
    };
    let text = out.join().unwrap_or_default();
    let said = err.join().unwrap_or_default();
    if status.success() && !text.trim().is_empty() {
        Ok(text)
    } else {
        Err(format!("{status}: {}", said.trim()))
    }
}
