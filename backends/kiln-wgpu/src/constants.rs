//! A kernel's constants matched to the shader's pipeline-overridable
//! constants: WGSL `override`s and SPIR-V specialization constants, set by
//! name or by number (B6).
//!
//! naga and wgpu take a constant declared with a number (`@id(1300)`, a
//! SPIR-V `SpecId`) by that number only, and one without by its name.
//! kiln takes either where the shader gives both, and hands naga and wgpu
//! the key they take, so `gain=1.1` and `1300=1.1` build the same pipeline.

use kiln_engine::CompileFailure;

use crate::kernel::Constants;

/// How `item` can be set: `1300 (gain)`, `1300`, or `gain`.
fn settable(item: &naga::Override) -> String {
    match (&item.name, item.id) {
        (Some(name), Some(id)) => format!("{id} ({name})"),
        (None, Some(id)) => id.to_string(),
        (Some(name), None) => name.clone(),
        (None, None) => "<unnamed>".to_owned(),
    }
}

/// The shader's constants as they can be set, for hints: `the shader's
/// constants, by number or name: 1300 (gain), bias`.
pub(crate) fn declared(module: &naga::Module) -> String {
    let all: Vec<String> = module
        .overrides
        .iter()
        .map(|(_, item)| settable(item))
        .collect();
    if all.is_empty() {
        "the shader declares no overridable constant".to_owned()
    } else {
        format!(
            "the shader's constants, as they can be set (number, or name in brackets): {}",
            all.join(", ")
        )
    }
}

/// `constants` keyed as naga and wgpu take them, each value checked
/// against its constant's type.
///
/// # Errors
///
/// A constant the shader does not declare (with the ones it does), one set
/// twice by name and number, or a value its type cannot hold.
pub(crate) fn resolve(
    module: &naga::Module,
    constants: &Constants,
) -> Result<Constants, CompileFailure> {
    let mut resolved = Constants::new();
    let mut given: Vec<(String, &str)> = Vec::new();
    for (name, value) in constants.iter() {
        let found = module.overrides.iter().find(|(_, item)| match item.id {
            // `01300` is 1300, as naga reads it.
            Some(id) => name.parse::<u16>() == Ok(id) || item.name.as_deref() == Some(name),
            None => item.name.as_deref() == Some(name),
        });
        let Some((_, item)) = found else {
            return Err(CompileFailure::message(format!(
                "the kernel sets the constant {name}, which the shader does not declare"
            ))
            .with_hint(format!(
                "set only constants the shader declares; {}",
                declared(module)
            )));
        };
        check_value(module, item, name, value)?;
        let key = match (item.id, &item.name) {
            (Some(id), _) => id.to_string(),
            (None, Some(declared)) => declared.clone(),
            (None, None) => name.to_owned(),
        };
        if let Some((_, first)) = given.iter().find(|(earlier, _)| *earlier == key) {
            return Err(CompileFailure::message(format!(
                "the kernel sets the constant {} twice, as {first} and as {name}",
                settable(item)
            ))
            .with_hint("set each constant once, by its number or by its name"));
        }
        given.push((key.clone(), name));
        resolved.set(key, value);
    }
    Ok(resolved)
}

/// Refuses a value its constant's type cannot hold exactly: naga converts
/// the `f64` wgpu takes to the constant's type, and a NaN or 2.0 for a
/// `bool` becomes `true`, 1e10 for an `i32` saturates, in silence. A
/// boolean is 0 or 1, an integer a whole number in its type's range, a
/// float finite and within its type's range.
fn check_value(
    module: &naga::Module,
    item: &naga::Override,
    name: &str,
    value: f64,
) -> Result<(), CompileFailure> {
    let naga::TypeInner::Scalar(scalar) = module.types[item.ty].inner else {
        return Ok(());
    };
    let in_range = |low: f64, high: f64| value.fract() == 0.0 && (low..=high).contains(&value);
    let (fits, expected) = match (scalar.kind, scalar.width) {
        (naga::ScalarKind::Bool, _) => (value == 0.0 || value == 1.0, "0 or 1 (false or true)"),
        (naga::ScalarKind::Sint, 4) => (
            in_range(f64::from(i32::MIN), f64::from(i32::MAX)),
            "a whole number in i32's range",
        ),
        (naga::ScalarKind::Uint, 4) => (
            in_range(0.0, f64::from(u32::MAX)),
            "a whole number in u32's range",
        ),
        (naga::ScalarKind::Float, 2) => (
            value.is_finite() && value.abs() <= 65504.0,
            "a finite number in f16's range",
        ),
        (naga::ScalarKind::Float, 4) => (
            value.is_finite() && value.abs() <= f64::from(f32::MAX),
            "a finite number in f32's range",
        ),
        (naga::ScalarKind::Float, _) => (value.is_finite(), "a finite number"),
        _ => (true, ""),
    };
    if fits {
        return Ok(());
    }
    let type_name = match scalar.kind {
        naga::ScalarKind::Bool => "bool".to_owned(),
        naga::ScalarKind::Sint => format!("i{}", scalar.width * 8),
        naga::ScalarKind::Uint => format!("u{}", scalar.width * 8),
        _ => format!("f{}", scalar.width * 8),
    };
    Err(CompileFailure::message(format!(
        "the constant {name} is a {type_name}, and {value} is not one"
    ))
    .with_hint(format!("give {name} {expected}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module() -> naga::Module {
        naga::front::wgsl::parse_str(
            "@id(1300) override gain: f32 = 1.0;\n\
             override bias: f32 = 0.0;\n\
             @id(7) override count: u32 = 1u;\n\
             @compute @workgroup_size(1) fn main() { _ = gain * bias + f32(count); }",
        )
        .expect("the source parses")
    }

    fn constants(pairs: &[(&str, f64)]) -> Constants {
        let mut constants = Constants::new();
        for (name, value) in pairs {
            constants.set(*name, *value);
        }
        constants
    }

    // B6: an @id override by number or by name, both handed on by number.
    #[test]
    fn a_numbered_constant_is_set_by_number_or_name() {
        let by_number = resolve(&module(), &constants(&[("1300", 1.1), ("bias", 2.0)]))
            .expect("1300 is gain's number");
        let by_name = resolve(&module(), &constants(&[("gain", 1.1), ("bias", 2.0)]))
            .expect("gain is declared");
        assert_eq!(by_number, by_name);
        assert_eq!(by_number.canonical(), "1300=1.1 bias=2.0");
    }

    // B6
    #[test]
    fn an_unknown_constant_lists_them_as_they_can_be_set() {
        let failure = resolve(&module(), &constants(&[("gian", 1.0)])).expect_err("a typo");
        let hint = failure.hint.clone().unwrap_or_default();
        assert!(failure.to_string().contains("gian"), "{failure}");
        assert!(
            hint.contains("1300 (gain)") && hint.contains("bias") && hint.contains("7 (count)"),
            "{hint}"
        );
        let twice = resolve(&module(), &constants(&[("1300", 1.0), ("gain", 2.0)]))
            .expect_err("gain set twice");
        assert!(twice.to_string().contains("twice"), "{twice}");
        let wrong = resolve(&module(), &constants(&[("7", 1.5)])).expect_err("1.5 is no u32");
        assert!(wrong.to_string().contains("u32"), "{wrong}");
    }
}
