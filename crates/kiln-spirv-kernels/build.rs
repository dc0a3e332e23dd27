//! Compiles the GLSL kernels of `glsl/` to SPIR-V with glslangValidator
//! (Debian's glslang-tools), checks each with spirv-val and links the
//! modules of several entries with spirv-link (spirv-tools), and writes
//! `kernels.rs`, which embeds every module: the test binaries that use
//! them read no file at run time, so they run on any machine from any
//! folder.
//!
//! Without the tools the modules are absent and their tests skip, saying
//! why; with `KILN_REQUIRE_GLSLANG=1` (set by the workspace's test runner
//! once it has installed them) their absence fails the build.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each module: its name and the `(GLSL file, entry name)` it is made of.
/// A module of several entries is linked from one compile per entry.
const MODULES: &[(&str, &[(&str, &str)])] = &[
    ("scale_bias", &[("scale_bias.comp", "main")]),
    ("saxpy", &[("saxpy.comp", "main")]),
    ("reduce_sum", &[("reduce_sum.comp", "main")]),
    ("square_f64", &[("square_f64.comp", "main")]),
    ("huge_workgroup", &[("huge_workgroup.comp", "main")]),
    ("spec_shared_u8", &[("spec_shared_u8.comp", "main")]),
    (
        "passes",
        &[("double.comp", "forward"), ("halve.comp", "backward")],
    ),
];

fn main() {
    let glsl = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("glsl");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed=glsl");
    println!("cargo:rerun-if-env-changed=KILN_REQUIRE_GLSLANG");
    println!("cargo:rerun-if-env-changed=PATH");
    let required = std::env::var("KILN_REQUIRE_GLSLANG").is_ok_and(|value| value == "1");

    let mut generated = String::from("// Written by build.rs.\n");
    let built = MODULES
        .iter()
        .map(|(name, parts)| build(&glsl, &out, name, parts).map(|path| (*name, path)))
        .collect::<Result<Vec<_>, String>>();
    match built {
        Ok(modules) => {
            generated.push_str("const MISSING: Option<&str> = None;\n");
            generated.push_str("const MODULES: &[(&str, &[u8])] = &[\n");
            for (name, path) in modules {
                generated.push_str(&format!(
                    "    ({name:?}, include_bytes!({:?})),\n",
                    path.display().to_string()
                ));
            }
            generated.push_str("];\n");
        }
        Err(reason) if required => panic!(
            "the SPIR-V test kernels could not be built, and KILN_REQUIRE_GLSLANG=1: {reason}"
        ),
        Err(reason) => {
            println!("cargo:warning=SPIR-V test kernels not built (their tests skip): {reason}");
            generated.push_str(&format!(
                "const MISSING: Option<&str> = Some({reason:?});\n"
            ));
            generated.push_str("const MODULES: &[(&str, &[u8])] = &[];\n");
        }
    }
    std::fs::write(out.join("kernels.rs"), generated).expect("OUT_DIR is writable");
}

/// Compiles, checks and links one module; its path, or why not.
fn build(glsl: &Path, out: &Path, name: &str, parts: &[(&str, &str)]) -> Result<PathBuf, String> {
    let mut objects = Vec::new();
    for (file, entry) in parts {
        let object = out.join(format!("{name}.{entry}.spv"));
        run(
            Command::new("glslangValidator")
                .args(["-V", "--target-env", "vulkan1.1", "-e", entry])
                .args(["--source-entrypoint", "main", "-o"])
                .arg(&object)
                .arg(glsl.join(file)),
            "glslangValidator",
            "glslang-tools",
        )?;
        objects.push(object);
    }
    let module = out.join(format!("{name}.spv"));
    if let [only] = objects.as_slice() {
        std::fs::copy(only, &module).map_err(|error| error.to_string())?;
    } else {
        run(
            Command::new("spirv-link")
                .args(&objects)
                .arg("-o")
                .arg(&module),
            "spirv-link",
            "spirv-tools",
        )?;
    }
    run(
        Command::new("spirv-val").arg(&module),
        "spirv-val",
        "spirv-tools",
    )?;
    Ok(module)
}

/// Runs `command`; why it failed, naming the Debian package of `tool`.
fn run(command: &mut Command, tool: &str, package: &str) -> Result<(), String> {
    match command.output() {
        Err(error) => Err(format!(
            "{tool} did not run ({error}): install Debian's {package} (apt-get install {package})"
        )),
        Ok(output) if !output.status.success() => Err(format!(
            "{tool} failed: {}{}",
            String::from_utf8_lossy(&output.stdout).trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Ok(_) => Ok(()),
    }
}
