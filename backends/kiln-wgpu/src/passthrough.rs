//! SPIR-V the driver reads (B7): a module naga's front end refuses (arrays
//! sized by specialization constants, 8-bit storage, ...) is handed to the
//! Vulkan driver as it is, through wgpu's pass-through shaders. What the
//! pipeline needs is read from the module's own instructions: the entry's
//! workgroup size and the buffers bound (set, binding, read-only or not).
//! Specialization constants are written into the module's bytes (wgpu
//! hands a pass-through module to the driver without specialization), so
//! the artifact is keyed, and built, by the specialized bytes.
//!
//! The reading is a bounded walk over the module's words (no parse that
//! allocates by what the module claims); where `spirv-val` is installed it
//! validates the specialized module first, and without it the module is
//! only checked, which the compile says in a warning.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use kiln_engine::{CompileFailure, Diagnostic, Severity};

use crate::compiler::ShaderBinding;
use crate::kernel::{BufferKind, Constants};

/// What a pass-through pipeline is built from.
pub(crate) struct Reflected {
    pub(crate) workgroup_size: [u32; 3],
    pub(crate) bindings: Vec<ShaderBinding>,
}

/// One instruction: its opcode and operands (the words after the first).
struct Instruction<'a> {
    opcode: u32,
    operands: &'a [u32],
    /// Where its first word is.
    at: usize,
}

/// The instructions of a module whose header was checked.
fn instructions(words: &[u32]) -> Result<Vec<Instruction<'_>>, CompileFailure> {
    let mut out = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 || at + count > words.len() {
            return Err(CompileFailure::message(format!(
                "the SPIR-V instruction at word {at} has {count} words, which the module cannot hold"
            )));
        }
        out.push(Instruction {
            opcode: words[at] & 0xffff,
            operands: &words[at + 1..at + count],
            at,
        });
        at += count;
    }
    Ok(out)
}

/// A literal string's text.
fn string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .take_while(|byte| *byte != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

const OP_NAME: u32 = 5;
const OP_EXECUTION_MODE: u32 = 16;
const OP_TYPE_INT: u32 = 21;
const OP_TYPE_FLOAT: u32 = 22;
const OP_TYPE_POINTER: u32 = 32;
const OP_CONSTANT: u32 = 43;
const OP_CONSTANT_COMPOSITE: u32 = 44;
const OP_SPEC_CONSTANT_TRUE: u32 = 48;
const OP_SPEC_CONSTANT_FALSE: u32 = 49;
const OP_SPEC_CONSTANT: u32 = 50;
const OP_SPEC_CONSTANT_COMPOSITE: u32 = 51;
const OP_VARIABLE: u32 = 59;
const OP_DECORATE: u32 = 71;
const OP_MEMBER_DECORATE: u32 = 72;
const OP_ENTRY_POINT: u32 = 15;
const DECORATION_SPEC_ID: u32 = 1;
const DECORATION_BLOCK: u32 = 2;
const DECORATION_BUFFER_BLOCK: u32 = 3;
const DECORATION_BUILT_IN: u32 = 11;
const DECORATION_NON_WRITABLE: u32 = 24;
const DECORATION_BINDING: u32 = 33;
const DECORATION_DESCRIPTOR_SET: u32 = 34;
const BUILT_IN_WORKGROUP_SIZE: u32 = 25;
const MODE_LOCAL_SIZE: u32 = 17;
const STORAGE_UNIFORM: u32 = 2;
const STORAGE_STORAGE_BUFFER: u32 = 12;

/// `bytes` with each constant of `constants` written into its
/// `OpSpecConstant` (by `SpecId` number, or by the name `OpName` gives it),
/// and the constants as resolved (by number).
pub(crate) fn specialize(
    bytes: &[u8],
    constants: &Constants,
) -> Result<(Vec<u8>, Constants), CompileFailure> {
    let mut words = crate::spirv::words(bytes);
    let listed = instructions(&words)?;
    let mut spec_ids: HashMap<u32, u32> = HashMap::new();
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut types: HashMap<u32, (u32, u32, bool)> = HashMap::new();
    for instruction in &listed {
        match (instruction.opcode, instruction.operands) {
            (OP_DECORATE, [target, DECORATION_SPEC_ID, number, ..]) => {
                spec_ids.insert(*target, *number);
            }
            (OP_NAME, [target, name @ ..]) => {
                names.insert(*target, string(name));
            }
            (OP_TYPE_INT, [id, width, signed]) => {
                types.insert(*id, (OP_TYPE_INT, *width, *signed == 1));
            }
            (OP_TYPE_FLOAT, [id, width, ..]) => {
                types.insert(*id, (OP_TYPE_FLOAT, *width, true));
            }
            _ => {}
        }
    }
    let mut resolved = Constants::new();
    let mut patches: Vec<(usize, Vec<u32>)> = Vec::new();
    let mut seen = Vec::new();
    for instruction in &listed {
        let (opcode, operands) = (instruction.opcode, instruction.operands);
        if !matches!(
            opcode,
            OP_SPEC_CONSTANT | OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE
        ) {
            continue;
        }
        let [ty, id, ..] = operands else { continue };
        let Some(number) = spec_ids.get(id) else {
            continue;
        };
        let name = names.get(id).cloned().unwrap_or_default();
        let value = constants
            .iter()
            .find(|(key, _)| *key == number.to_string() || (!name.is_empty() && *key == name))
            .map(|(key, value)| (key.to_owned(), value));
        let Some((key, value)) = value else { continue };
        seen.push(key.clone());
        resolved.set(number.to_string(), value);
        let written = match (opcode, types.get(ty)) {
            (OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE, _) => {
                let opcode = if value == 0.0 {
                    OP_SPEC_CONSTANT_FALSE
                } else {
                    OP_SPEC_CONSTANT_TRUE
                };
                patches.push((instruction.at, vec![(3 << 16) | opcode]));
                continue;
            }
            (_, Some((OP_TYPE_INT, 32, signed))) => {
                let fits = value.fract() == 0.0
                    && if *signed {
                        (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&value)
                    } else {
                        (0.0..=f64::from(u32::MAX)).contains(&value)
                    };
                if !fits {
                    return Err(refused_value(&key, value, "a 32-bit integer"));
                }
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let word = if *signed {
                    (value as i32) as u32
                } else {
                    value as u32
                };
                vec![word]
            }
            #[allow(clippy::cast_possible_truncation)]
            (_, Some((OP_TYPE_FLOAT, 32, _))) => vec![(value as f32).to_bits()],
            (_, Some((OP_TYPE_FLOAT, 64, _))) => {
                let bits = value.to_bits();
                #[allow(clippy::cast_possible_truncation)]
                let words = vec![bits as u32, (bits >> 32) as u32];
                words
            }
            _ => {
                return Err(refused_value(&key, value, "a type kiln can write"));
            }
        };
        // Operands after the type and the result: the value's words.
        let start = instruction.at + 3;
        if written.len() != operands.len() - 2 {
            return Err(refused_value(&key, value, "the constant's width"));
        }
        patches.push((start, written));
    }
    for (key, _) in constants.iter() {
        if !seen.iter().any(|known| known == key) {
            return Err(CompileFailure::message(format!(
                "the module declares no specialization constant `{key}`"
            ))
            .with_hint("set constants by their constant_id number or their name in the module"));
        }
    }
    // A value's words, or a boolean's opcode word.
    for (at, written) in patches {
        words[at..at + written.len()].copy_from_slice(&written);
    }
    Ok((
        words.iter().flat_map(|word| word.to_le_bytes()).collect(),
        resolved,
    ))
}

fn refused_value(key: &str, value: f64, what: &str) -> CompileFailure {
    CompileFailure::message(format!(
        "the specialization constant {key}={value} does not fit {what}"
    ))
}

/// The workgroup size of `entry` and the buffers the module binds.
pub(crate) fn reflect(bytes: &[u8], entry: &str) -> Result<Reflected, CompileFailure> {
    let words = crate::spirv::words(bytes);
    let listed = instructions(&words)?;
    let mut entry_id = None;
    let mut entries = Vec::new();
    for instruction in &listed {
        if let (OP_ENTRY_POINT, [5, id, name @ ..]) = (instruction.opcode, instruction.operands) {
            let name = string(name);
            if name == entry {
                entry_id = Some(*id);
            }
            entries.push(name);
        }
    }
    let Some(entry_id) = entry_id else {
        return Err(CompileFailure::message(format!(
            "entry point `{entry}` is not a GLCompute entry point of the module"
        ))
        .with_hint(format!(
            "name one of the module's compute entry points: {}",
            entries.join(", ")
        )));
    };
    let mut sets = HashMap::new();
    let mut binding_of = HashMap::new();
    let mut blocks = HashMap::new();
    let mut non_writable = Vec::new();
    let mut workgroup_builtin = None;
    let mut pointers = HashMap::new();
    let mut scalars: HashMap<u32, u32> = HashMap::new();
    let mut composites: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut workgroup_size = None;
    let mut variables = Vec::new();
    for instruction in &listed {
        match (instruction.opcode, instruction.operands) {
            (OP_DECORATE, [target, DECORATION_DESCRIPTOR_SET, set]) => {
                sets.insert(*target, *set);
            }
            (OP_DECORATE, [target, DECORATION_BINDING, binding]) => {
                binding_of.insert(*target, *binding);
            }
            (
                OP_DECORATE,
                [
                    target,
                    decoration @ (DECORATION_BLOCK | DECORATION_BUFFER_BLOCK),
                ],
            ) => {
                blocks.insert(*target, *decoration);
            }
            (OP_DECORATE, [target, DECORATION_NON_WRITABLE]) => non_writable.push(*target),
            (OP_MEMBER_DECORATE, [target, _, DECORATION_NON_WRITABLE]) => {
                non_writable.push(*target);
            }
            (OP_DECORATE, [target, DECORATION_BUILT_IN, BUILT_IN_WORKGROUP_SIZE]) => {
                workgroup_builtin = Some(*target);
            }
            (OP_TYPE_POINTER, [id, class, pointee]) => {
                pointers.insert(*id, (*class, *pointee));
            }
            (OP_CONSTANT | OP_SPEC_CONSTANT, [_, id, value, ..]) => {
                scalars.insert(*id, *value);
            }
            (OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE, [_, id, parts @ ..]) => {
                composites.insert(*id, parts.to_vec());
            }
            (OP_EXECUTION_MODE, [target, MODE_LOCAL_SIZE, x, y, z]) if *target == entry_id => {
                workgroup_size = Some([*x, *y, *z]);
            }
            (OP_VARIABLE, [ty, id, class, ..]) => variables.push((*ty, *id, *class)),
            _ => {}
        }
    }
    // The WorkgroupSize built-in wins over LocalSize, as in Vulkan.
    if let Some(parts) = workgroup_builtin.and_then(|id| composites.get(&id))
        && let [x, y, z] = parts.as_slice()
        && let (Some(x), Some(y), Some(z)) = (scalars.get(x), scalars.get(y), scalars.get(z))
    {
        workgroup_size = Some([*x, *y, *z]);
    }
    let Some(workgroup_size) = workgroup_size else {
        return Err(CompileFailure::message(format!(
            "entry point `{entry}` has no workgroup size kiln can read (LocalSize or the \
             WorkgroupSize built-in)"
        )));
    };
    let mut bindings = Vec::new();
    for (ty, id, class) in variables {
        if !matches!(class, STORAGE_UNIFORM | STORAGE_STORAGE_BUFFER) {
            continue;
        }
        let (Some(set), Some(binding)) = (sets.get(&id), binding_of.get(&id)) else {
            continue;
        };
        let pointee = pointers.get(&ty).map_or(0, |(_, pointee)| *pointee);
        let storage = class == STORAGE_STORAGE_BUFFER
            || blocks.get(&pointee) == Some(&DECORATION_BUFFER_BLOCK);
        let kind = if !storage {
            BufferKind::Uniform
        } else if non_writable.contains(&id) || non_writable.contains(&pointee) {
            BufferKind::ReadOnlyStorage
        } else {
            BufferKind::Storage
        };
        bindings.push(ShaderBinding {
            group: *set,
            binding: *binding,
            kind,
        });
    }
    bindings.sort_by_key(|binding| (binding.group, binding.binding));
    Ok(Reflected {
        workgroup_size,
        bindings,
    })
}

/// What `spirv-val` says of `bytes`: `Ok(None)` valid, `Ok(Some(note))` not
/// validated (no `spirv-val`), `Err` its refusal.
pub(crate) fn validate(bytes: &[u8], label: &str) -> Result<Option<Diagnostic>, CompileFailure> {
    let child = Command::new("spirv-val")
        .args(["--target-env", "vulkan1.1", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        // Without the validator, at least the module's shape: whole
        // instructions, every function ended (a module cut short at an
        // instruction's edge ends inside one), never handed to a driver.
        whole_functions(bytes, label)?;
        return Ok(Some(Diagnostic {
            severity: Severity::Warning,
            message: format!(
                "{label}: only checked, not validated: spirv-val (SPIR-V Tools) is not installed"
            ),
            location: None,
        }));
    };
    if let Some(mut input) = child.stdin.take() {
        // A validator that stops reading answers below.
        let _ = input.write_all(bytes);
    }
    let output = child.wait_with_output().map_err(|error| {
        CompileFailure::message(format!("{label}: spirv-val did not finish: {error}"))
    })?;
    if output.status.success() {
        return Ok(None);
    }
    let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Err(CompileFailure::message(format!(
        "{label}: spirv-val refused the module: {}",
        said.lines().next().unwrap_or("no reason given")
    ))
    .with_log(said))
}

/// `OpFunction` and `OpFunctionEnd`.
const OP_FUNCTION: u32 = 54;
const OP_FUNCTION_END: u32 = 56;

/// Whether `bytes` is whole instructions whose functions all end, the
/// last of them last: what a module cut short or run on fails.
fn whole_functions(bytes: &[u8], label: &str) -> Result<(), CompileFailure> {
    let words = crate::spirv::words(bytes);
    let listed = instructions(&words)?;
    let mut open = 0usize;
    for instruction in &listed {
        match instruction.opcode {
            OP_FUNCTION if open == 0 => open = 1,
            OP_FUNCTION_END if open == 1 => open = 0,
            OP_FUNCTION | OP_FUNCTION_END => open = usize::MAX,
            _ => {}
        }
    }
    let ends_a_function = listed
        .last()
        .is_some_and(|last| last.opcode == OP_FUNCTION_END);
    if open == 0 && ends_a_function {
        Ok(())
    } else {
        Err(CompileFailure::message(format!(
            "{label}: the module does not end its functions (cut short?), and without spirv-val \
             (SPIR-V Tools) nothing else checks it: it is not handed to the driver"
        )))
    }
}
