//! kiln's SPIR-V test and example kernels, born in GLSL: the sources are
//! in this crate's `glsl/` folder, and its build compiles them with
//! glslangValidator and embeds the modules, so the programs that use them
//! read no file at run time.
//!
//! | module | entries | what it does |
//! |---|---|---|
//! | `scale_bias` | `main` | `data[i] = data[i] * FACTOR + BIAS`, both specialization constants (ids 0 and 1) |
//! | `saxpy` | `main` | `y = a * x + y` (uniform `a`, `n`) |
//! | `reduce_sum` | `main` | one partial sum per workgroup of 128, in shared memory |
//! | `square_f64` | `main` | `data[i] *= data[i]` in `double`: needs 64-bit floats |
//! | `huge_workgroup` | `main` | a 1024 x 1024 workgroup no device allows |
//! | `passes` | `forward`, `backward` | doubles and halves `data`, two entries of one module |
//! | `spec_shared_u8` | `main` | sums `BLOCK` bytes (8-bit storage) times `SCALE` per workgroup, in a shared array sized by `BLOCK` (constant ids 0 and 1): a module naga cannot read |

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// The GLSL sources, by file name, for messages and documentation.
pub const SOURCES: &[(&str, &str)] = &[
    ("scale_bias.comp", include_str!("../glsl/scale_bias.comp")),
    ("saxpy.comp", include_str!("../glsl/saxpy.comp")),
    ("reduce_sum.comp", include_str!("../glsl/reduce_sum.comp")),
    ("square_f64.comp", include_str!("../glsl/square_f64.comp")),
    (
        "huge_workgroup.comp",
        include_str!("../glsl/huge_workgroup.comp"),
    ),
    (
        "spec_shared_u8.comp",
        include_str!("../glsl/spec_shared_u8.comp"),
    ),
    ("double.comp", include_str!("../glsl/double.comp")),
    ("halve.comp", include_str!("../glsl/halve.comp")),
];

/// The SPIR-V module `name`, or why it was not built (glslangValidator or
/// spirv-tools missing where this crate was built).
///
/// # Errors
///
/// The modules were not built, or none is called `name`.
pub fn module(name: &str) -> Result<&'static [u8], String> {
    if let Some(reason) = MISSING {
        return Err(format!("the SPIR-V kernels were not built: {reason}"));
    }
    MODULES
        .iter()
        .find(|(module, _)| *module == name)
        .map(|(_, bytes)| *bytes)
        .ok_or_else(|| {
            format!(
                "no SPIR-V kernel `{name}`; there are {}",
                MODULES
                    .iter()
                    .map(|(module, _)| *module)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}
