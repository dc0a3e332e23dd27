//! What `kiln warm`'s walk asks of the wgpu backend before any compile:
//! the WGSL modules a text imports (B9), found among the folder's module
//! files, and the compute entries of a SPIR-V module.

use std::path::Path;

pub use kiln_wgpu::WgslModule;

use crate::manifest::KernelFile;

/// The `GLCompute` entry points of the SPIR-V module `bytes`; naga's
/// reason when it cannot read them.
pub fn spirv_compute_entries(bytes: &[u8]) -> Result<Vec<String>, kiln_engine::CompileFailure> {
    kiln_wgpu::spirv_compute_entries(bytes)
}

/// The modules of `modules` (the folder's WGSL files without a compute
/// entry) that the WGSL text `source` imports, directly or through one of
/// them, each once, named as it is imported. A module is found by the name
/// its `#define_import_path` gives it, else by its path under the folder
/// searched with `::` for `/` and no extension, or by the end of that path
/// (`wgsl/shared/math.wgsl` answers `shared::math` and `math`), the
/// longest name first; an import names a module or an item of one
/// (`shared::math::twice`). An import no module answers is left to the
/// compiler, which names it.
pub fn imported_modules(source: &str, modules: &[KernelFile]) -> Vec<kiln_wgpu::WgslModule> {
    let mut found: Vec<kiln_wgpu::WgslModule> = Vec::new();
    let mut wanted = kiln_wgpu::wgsl_imports(source).1;
    while let Some(import) = wanted.pop() {
        let Some((module, as_name)) = module_for(&import, modules) else {
            continue;
        };
        if found.iter().any(|known| known.file == module.name) {
            continue;
        }
        wanted.extend(kiln_wgpu::wgsl_imports(&module.source).1);
        found.push(kiln_wgpu::WgslModule {
            name: as_name,
            file: module.name.clone(),
            source: module.source.to_string(),
        });
    }
    found.sort_by(|left, right| left.file.cmp(&right.file));
    found
}

/// The module `import` names, and the name it is known by.
fn module_for<'a>(import: &str, modules: &'a [KernelFile]) -> Option<(&'a KernelFile, String)> {
    let names_it = |name: &str| {
        import == name
            || import
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with("::"))
    };
    if let Some(named) = modules.iter().find_map(|module| {
        let name = kiln_wgpu::wgsl_imports(&module.source).0?;
        names_it(&name).then_some((module, name))
    }) {
        return Some(named);
    }
    let mut best: Option<(&KernelFile, String)> = None;
    for module in modules {
        let path = Path::new(&module.name).with_extension("");
        let parts: Vec<String> = path
            .components()
            .map(|part| part.as_os_str().to_string_lossy().into_owned())
            .collect();
        for start in 0..parts.len() {
            let name = parts[start..].join("::");
            let longer = best
                .as_ref()
                .is_none_or(|(_, known)| name.len() > known.len());
            if names_it(&name) && longer {
                best = Some((module, name));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::kernel::Language;

    /// A WGSL module file `name` holding `source`.
    fn module_file(name: &str, source: &str) -> KernelFile {
        KernelFile {
            name: name.to_owned(),
            folder: PathBuf::new(),
            language: Language::Wgsl,
            source: source.into(),
            module: None,
            entries: Vec::new(),
            specializations: Vec::new(),
            includes: Vec::new(),
            options: Vec::new(),
            backends: None,
            defines: Vec::new(),
            stdlib: true,
            modules: Vec::new(),
        }
    }

    // B9: a module is found by its `#define_import_path`, by its path under
    // the folder searched or the end of it, and through another module;
    // an import no module answers brings none (naga_oil reports the imports
    // a text uses).
    #[test]
    fn b9_an_import_finds_its_modules_by_name_path_and_through_others() {
        let modules = [
            module_file(
                "wgsl/shared/color.wgsl",
                "#define_import_path art::color\nfn c() {}\n",
            ),
            module_file(
                "wgsl/shared/tone.wesl",
                "#import art::color\nfn t() { color::c(); }\n",
            ),
            module_file("wgsl/other.wgsl", "fn o() {}\n"),
        ];
        let found = imported_modules("#import shared::tone::t\nfn k() { t(); }\n", &modules);
        let named: Vec<(&str, &str)> = found
            .iter()
            .map(|module| (module.file.as_str(), module.name.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("wgsl/shared/color.wgsl", "art::color"),
                ("wgsl/shared/tone.wesl", "shared::tone")
            ]
        );
        let by_stem = imported_modules("#import other\nfn k() { other::o(); }\n", &modules);
        assert_eq!(by_stem.len(), 1);
        assert_eq!(by_stem[0].name, "other");
        assert!(
            imported_modules("#import nowhere::at_all\nfn k() { at_all(); }\n", &modules)
                .is_empty()
        );
    }
}
