//! WGSL modules a kernel `#import`s (B9): shared files without a compute
//! entry, in the syntax of Bevy and vello (`#import shared::math` and
//! `#define_import_path`), composed with the kernel by naga_oil into one
//! module before naga validates it.
//!
//! Every module a kernel is given is part of its id and of its lowered
//! text, byte for byte (P13): an edit of an imported module recompiles
//! every kernel that imports it.

use std::collections::HashMap;
use std::fmt::Write as _;

use kiln_engine::{CompileFailure, Diagnostic, Location, Severity};
use naga_oil::compose::{
    ComposableModuleDescriptor, Composer, ComposerError, NagaModuleDescriptor, ShaderLanguage,
    ShaderType,
};
use serde::{Deserialize, Serialize};

/// A WGSL module a kernel may `#import`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WgslModule {
    /// The name `#import` gives it (`shared::math`), used when its text has
    /// no `#define_import_path` of its own.
    pub name: String,
    /// Its file, for messages (`shared/math.wgsl`).
    pub file: String,
    /// Its text.
    pub source: String,
}

/// What a WGSL text says of modules: the name its `#define_import_path`
/// gives it, and the modules its `#import`s name (`shared::math`), each
/// once, in order. Read by naga_oil's preprocessor, without parsing WGSL.
pub fn wgsl_imports(source: &str) -> (Option<String>, Vec<String>) {
    // A text with neither a directive nor a qualified name says nothing
    // of modules: answered without the preprocessor, whose first use
    // compiles its fourteen regular expressions (~2 ms, before `kiln
    // warm` starts opening its device).
    if !may_name_modules(source) {
        return (None, Vec::new());
    }
    let (name, imports, _) = naga_oil::compose::get_preprocessor_data(source);
    let mut names: Vec<String> = Vec::new();
    for import in imports {
        if !names.contains(&import.import) {
            names.push(import.import);
        }
    }
    (name, names)
}

/// Whether `source` may name a module: naga_oil finds imports and import
/// paths only in `#` directives and in `::`-qualified names.
fn may_name_modules(source: &str) -> bool {
    source.contains('#') || source.contains("::")
}

/// The lines the modules add to a kernel's lowered text: each module's
/// name, file and length, then its text.
pub(crate) fn cover_into(modules: &[WgslModule], text: &mut String) {
    for module in modules {
        let _ = writeln!(
            text,
            "// module {} from {}, {} bytes",
            module.name,
            module.file,
            module.source.len()
        );
        text.push_str(&module.source);
        text.push('\n');
    }
}

/// The WGSL of `source` composed with the `modules` it imports, written
/// back as one WGSL text by naga's WGSL writer; the text itself when it
/// imports nothing.
///
/// # Errors
///
/// A module or the kernel naga_oil refuses (a missing import, a syntax
/// error), with the file, line and column of the place.
pub(crate) fn compose(
    source: &str,
    label: &str,
    modules: &[WgslModule],
) -> Result<String, CompileFailure> {
    if modules.is_empty() && !source.contains("#import") {
        return Ok(source.to_owned());
    }
    let mut composer =
        Composer::non_validating().with_capabilities(naga::valid::Capabilities::all());
    // naga_oil takes a module after the modules it imports: add those whose
    // imports are in, until none is left or none can be added.
    let mut pending: Vec<&WgslModule> = modules.iter().collect();
    while !pending.is_empty() {
        let before = pending.len();
        pending.retain(|module| {
            let (_, imports) = wgsl_imports(&module.source);
            if !imports.iter().all(|name| composer.contains_module(name)) {
                return true;
            }
            // A module that fails is reported by the kernel's compose
            // below, where its import is missing.
            let _ = composer.add_composable_module(descriptor(module));
            false
        });
        if pending.len() == before {
            // A cycle, or an import no module gives: added as they are, so
            // naga_oil names what is missing.
            for module in pending.drain(..) {
                if let Err(error) = composer.add_composable_module(descriptor(module)) {
                    return Err(failure(&error, &composer, label));
                }
            }
        }
    }
    let module = composer
        .make_naga_module(NagaModuleDescriptor {
            source,
            file_path: label,
            shader_type: ShaderType::Wgsl,
            shader_defs: HashMap::new(),
            additional_imports: &[],
        })
        .map_err(|error| failure(&error, &composer, label))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|error| {
        CompileFailure::message(format!(
            "{label}: the kernel composed with its imports does not validate: {}",
            error.as_inner()
        ))
    })?;
    naga::back::wgsl::write_string(&module, &info, naga::back::wgsl::WriterFlags::empty()).map_err(
        |error| {
            CompileFailure::message(format!(
                "{label}: the kernel composed with its imports cannot be written as WGSL: {error}"
            ))
        },
    )
}

/// naga_oil's description of `module`.
fn descriptor(module: &WgslModule) -> ComposableModuleDescriptor<'_> {
    let (own_name, _) = wgsl_imports(&module.source);
    ComposableModuleDescriptor {
        source: &module.source,
        file_path: &module.file,
        language: ShaderLanguage::Wgsl,
        as_name: own_name.is_none().then(|| module.name.clone()),
        additional_imports: &[],
        shader_defs: HashMap::new(),
    }
}

/// naga_oil's error as a failure at the file, line and column of its
/// place, with naga_oil's rendering (the source excerpt) as its log.
fn failure(error: &ComposerError, composer: &Composer, label: &str) -> CompileFailure {
    let rendered = error.emit_to_string(composer);
    let location = place(&rendered);
    let message = match &location {
        Some(_) => error.inner.to_string(),
        None => format!("{label}: {}", error.inner),
    };
    CompileFailure::new(vec![Diagnostic {
        severity: Severity::Error,
        message,
        location,
    }])
    .with_log(rendered)
}

/// The `file:line:column` of a rendered report's first `┌─ ` line.
fn place(rendered: &str) -> Option<Location> {
    let line = rendered.lines().find_map(|line| {
        let at = line.find("┌─ ")?;
        Some(line[at + "┌─ ".len()..].trim())
    })?;
    let mut parts = line.rsplitn(3, ':');
    let column = parts.next()?.parse().ok()?;
    let number = parts.next()?.parse().ok()?;
    let file = parts.next()?.to_owned();
    Some(Location {
        file: Some(file),
        line: number,
        column: Some(column),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(name: &str, source: &str) -> WgslModule {
        WgslModule {
            name: name.to_owned(),
            file: format!("{}.wgsl", name.replace("::", "/")),
            source: source.to_owned(),
        }
    }

    const KERNEL: &str = "#import shared::math\n\
        @group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
        @compute @workgroup_size(64)\n\
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
            data[id.x] = math::twice(data[id.x]);\n\
        }\n";

    // B9: an imported module's function reaches the kernel, whose entry
    // keeps its name.
    #[test]
    fn b9_a_kernel_is_composed_with_the_module_it_imports() {
        let math = module(
            "shared::math",
            "fn twice(x: f32) -> f32 { return 2.0 * x; }\n",
        );
        let composed = compose(KERNEL, "double.wgsl", &[math]).expect("it composes");
        let parsed = naga::front::wgsl::parse_str(&composed).expect("WGSL again");
        assert_eq!(parsed.entry_points[0].name, "main");
        assert_eq!(wgsl_imports(KERNEL).1, ["shared::math"]);
    }

    // B9: the answer without the preprocessor is the preprocessor's: a
    // text it skips names no module, and a qualified name without any
    // directive still imports one.
    #[test]
    fn b9_a_text_without_directives_or_qualified_names_names_no_module() {
        let plain = [
            "@compute @workgroup_size(1) fn main() {}\n",
            "// a comment: module math, twice\nfn twice(x: f32) -> f32 { return 2.0 * x; }\n",
            "@group(0) @binding(0) var<storage, read_write> data: array<f32>;\n\
             override SCALE: f32 = 2.0;\n\
             @compute @workgroup_size(64)\n\
             fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n\
                 data[id.x] = SCALE * data[id.x];\n\
             }\n",
        ];
        for source in plain {
            assert!(!may_name_modules(source), "{source}");
            let (name, imports, _) = naga_oil::compose::get_preprocessor_data(source);
            assert_eq!((name, imports.len()), (None, 0), "{source}");
            assert_eq!(wgsl_imports(source), (None, Vec::new()));
        }
        let qualified = "fn k() -> f32 { return shared::math::twice(1.0); }\n";
        assert!(may_name_modules(qualified));
        assert_eq!(wgsl_imports(qualified).1, ["shared::math"]);
        let named = "#define_import_path shared::math\nfn twice(x: f32) -> f32 { return x; }\n";
        assert_eq!(wgsl_imports(named).0.as_deref(), Some("shared::math"));
    }

    // B9: a module that imports another is added after it, and a missing
    // module is named, at its line.
    #[test]
    fn b9_nested_imports_compose_and_a_missing_one_is_named_at_its_place() {
        let base = module("shared::base", "fn one() -> f32 { return 1.0; }\n");
        let math = module(
            "shared::math",
            "#import shared::base\nfn twice(x: f32) -> f32 { return (base::one() + 1.0) * x; }\n",
        );
        compose(KERNEL, "double.wgsl", &[math.clone(), base]).expect("nested imports compose");
        let failure = compose(KERNEL, "double.wgsl", &[math]).expect_err("shared::base missing");
        let text = failure.to_string();
        assert!(text.contains("shared::base"), "{text}");
        let missing = compose(KERNEL, "double.wgsl", &[]).expect_err("no modules at all");
        let first = missing.first_error().expect("an error");
        let at = first.location.as_ref().expect("a place");
        // naga_oil points at the use of the missing module's item.
        assert_eq!(
            (at.file.as_deref(), at.line),
            (Some("double.wgsl"), 5),
            "{missing}"
        );
        assert!(missing.log.contains("double.wgsl:5:"), "{}", missing.log);
    }
}
