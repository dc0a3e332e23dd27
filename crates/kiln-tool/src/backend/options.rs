//! The compiler options a kernel header may ask for (`// kiln options:`),
//! from an allow-list per backend (B6).
//!
//! An allow-list rather than anything the compiler takes: each option
//! allowed changes the code in a way its key covers (it reaches the
//! compiler as one argument, which is in the key), and none makes the
//! compiler read or write a file behind the key, as `-I`, `-include` or
//! `-o` would. Headers come from `// kiln include:` and `--include`, which
//! kiln resolves itself (P13).
//!
//! | CUDA (NVRTC) | HIP (hipRTC) |
//! |---|---|
//! | `--use_fast_math` | `-ffast-math` (or `--use_fast_math`) |
//! | `-std=c++11` ... `-std=c++20` | the same |
//! | `--maxrregcount=N` | |
//! | `-lineinfo`, `-G` | `-O0` ... `-O3` |
//! | `-rdc=true`, `-rdc=false` | `-fgpu-rdc` |
//! | `-ftz=`, `-prec-div=`, `-prec-sqrt=`, `-fmad=` with `true`/`false` | `-ffp-contract=fast`, `on`, `off` |
//! | `--extra-device-vectorization`, `-default-device`, `--device-int128` | `-fno-unroll-loops`, `-munsafe-fp-atomics` |

use kiln_cuda::{CudaOptions, CxxStandard};
use kiln_hip::HipOptions;

/// CUDA's allowed options, as the refusal lists them.
const CUDA_ALLOWED: &str = "--use_fast_math, -std=c++11|14|17|20, --maxrregcount=N, -lineinfo, \
                            -G, -rdc=true|false, -ftz=, -prec-div=, -prec-sqrt=, -fmad= (true or \
                            false), --extra-device-vectorization, -default-device, \
                            --device-int128";

/// HIP's allowed options, as the refusal lists them.
const HIP_ALLOWED: &str = "-ffast-math (or --use_fast_math), -std=c++11|14|17|20, -O0|1|2|3, \
                           -fgpu-rdc, -ffp-contract=fast|on|off, -fno-unroll-loops, \
                           -munsafe-fp-atomics";

/// NVRTC options allowed as written.
const CUDA_FLAGS: [&str; 9] = [
    "-lineinfo",
    "-G",
    "-rdc=true",
    "-rdc=false",
    "--extra-device-vectorization",
    "-default-device",
    "--device-int128",
    "--generate-line-info",
    "--device-debug",
];

/// NVRTC options allowed with `=true` or `=false`.
const CUDA_SWITCHES: [&str; 4] = ["-ftz", "-prec-div", "-prec-sqrt", "-fmad"];

/// hipRTC options allowed as written.
const HIP_FLAGS: [&str; 10] = [
    "-O0",
    "-O1",
    "-O2",
    "-O3",
    "-fgpu-rdc",
    "-ffp-contract=fast",
    "-ffp-contract=on",
    "-ffp-contract=off",
    "-fno-unroll-loops",
    "-munsafe-fp-atomics",
];

/// The C++ standard `-std=c++NN` names.
fn standard(option: &str) -> Option<CxxStandard> {
    // `--std=c++20` is NVRTC's long spelling of `-std=c++20`.
    let option = option
        .strip_prefix('-')
        .filter(|rest| rest.starts_with("-std="))
        .unwrap_or(option);
    CxxStandard::ALL
        .into_iter()
        .find(|standard| standard.flag() == option)
}

fn refused(option: &str, compiler: &str, allowed: &str) -> String {
    if kiln_cxx::names_a_file(option) {
        format!(
            "the option `{option}` names a file or an include folder, which kiln never passes \
             to {compiler}: give include folders with `// kiln include: DIR` or `--include DIR`"
        )
    } else {
        format!(
            "the option `{option}` is not one kiln warm passes to {compiler}; it passes \
             {allowed}"
        )
    }
}

/// `options` on top of `base`, for NVRTC.
///
/// # Errors
///
/// The first option that is not on CUDA's allow-list, naming the list.
pub fn cuda(base: CudaOptions, options: &[String]) -> Result<CudaOptions, String> {
    let mut built = base;
    for option in options {
        let option = option.as_str();
        if matches!(option, "--use_fast_math" | "-use_fast_math") {
            built = built.fast_math(true);
        } else if let Some(standard) = standard(option) {
            built = built.standard(standard);
        } else if let Some(count) = option
            .strip_prefix("--maxrregcount=")
            .or_else(|| option.strip_prefix("-maxrregcount="))
        {
            let registers = count
                .parse::<u32>()
                .ok()
                .filter(|registers| *registers > 0)
                .ok_or_else(|| format!("`{option}`: the register cap must be a positive number"))?;
            built = built.max_registers(registers);
        } else if CUDA_FLAGS.contains(&option)
            || option.split_once('=').is_some_and(|(name, value)| {
                // `--ftz=` is the long spelling of `-ftz=`.
                let name = name
                    .strip_prefix('-')
                    .filter(|rest| rest.starts_with('-'))
                    .unwrap_or(name);
                CUDA_SWITCHES.contains(&name) && matches!(value, "true" | "false")
            })
        {
            built = built.flag(option);
        } else {
            return Err(refused(option, "NVRTC", CUDA_ALLOWED));
        }
    }
    Ok(built)
}

/// `options` on top of `base`, for hipRTC.
///
/// # Errors
///
/// The first option that is not on HIP's allow-list, naming the list.
pub fn hip(base: HipOptions, options: &[String]) -> Result<HipOptions, String> {
    let mut built = base;
    for option in options {
        let option = option.as_str();
        if matches!(option, "-ffast-math" | "--use_fast_math") {
            built = built.fast_math(true);
        } else if let Some(standard) = standard(option) {
            built = built.standard(standard);
        } else if HIP_FLAGS.contains(&option) {
            built = built.flag(option);
        } else {
            return Err(refused(option, "hipRTC", HIP_ALLOWED));
        }
    }
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(options: &[&str]) -> Vec<String> {
        options.iter().map(|option| (*option).to_owned()).collect()
    }

    // B6
    #[test]
    fn allowed_options_become_the_backends_own() {
        let options = cuda(
            CudaOptions::default(),
            &owned(&[
                "--use_fast_math",
                "-std=c++20",
                "--maxrregcount=64",
                "-rdc=true",
                "-ftz=false",
            ]),
        )
        .expect("allowed");
        assert_eq!(
            options.arguments_past_architecture(),
            [
                "-std=c++20",
                "--use_fast_math",
                "-maxrregcount=64",
                "-rdc=true",
                "-ftz=false"
            ]
        );
        let options = hip(HipOptions::new(), &owned(&["--use_fast_math", "-O3"])).expect("allowed");
        assert_eq!(options.flags_past_architecture(), ["-ffast-math", "-O3"]);
    }

    // B6, P13
    #[test]
    fn any_other_option_is_refused_naming_the_list_and_a_path_says_so() {
        let error = cuda(CudaOptions::default(), &owned(&["-Xptxas=-v"])).expect_err("not listed");
        assert!(
            error.contains("-Xptxas=-v") && error.contains("--use_fast_math"),
            "{error}"
        );
        for option in ["-I/usr/include", "--include-path=/x", "-include"] {
            let error = cuda(CudaOptions::default(), &owned(&[option])).expect_err("a path");
            assert!(error.contains("names a file"), "{error}");
            let error = hip(HipOptions::new(), &owned(&[option])).expect_err("a path");
            assert!(error.contains("// kiln include"), "{error}");
        }
        let error = hip(HipOptions::new(), &owned(&["-rdc=true"])).expect_err("CUDA's");
        assert!(error.contains("-fgpu-rdc"), "{error}");
        cuda(CudaOptions::default(), &owned(&["--maxrregcount=0"])).expect_err("zero registers");
    }
}
