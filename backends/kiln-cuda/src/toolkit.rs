//! The CUDA toolkit's include folder: where angle includes of the toolkit's
//! own headers (`<cuda_fp16.h>`, `<cooperative_groups.h>`) are found when
//! no include folder of the kernel holds them (P13).
//!
//! NVRTC knows no header of the toolkit by itself and kiln gives it no
//! include path, so kiln reads these headers as it reads a kernel's own and
//! hands them over in memory, each one's text in the key.
//!
//! The folder is, in order: `KILN_CUDA_INCLUDE`; `$CUDA_HOME/include` and
//! `$CUDA_PATH/include`; the include folders beside the NVRTC library that
//! was opened (NVIDIA's wheels put `nvidia/<part>/lib/libnvrtc.so` beside
//! `nvidia/<part>/include` of the runtime and CCCL wheels); then
//! `/usr/local/cuda/include`. A folder counts when it holds
//! `cuda_runtime.h`, except `KILN_CUDA_INCLUDE`, which is taken as given.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The toolkit's include folders: [`include_folder`] and, when it has
/// one, its `cccl` folder (CUDA 13 keeps `cuda/std/...` there, which the
/// toolkit's own headers include by `<cuda/std/...>`).
pub fn include_folders() -> Vec<PathBuf> {
    let Some(folder) = include_folder() else {
        return Vec::new();
    };
    let mut folders = vec![folder.to_path_buf()];
    let cccl = folder.join("cccl");
    if cccl.is_dir() {
        folders.push(cccl);
    }
    folders
}

/// Sets `search` up for NVRTC: the toolkit's include folders, and
/// stand-ins for the standard headers from its libcu++ (B8).
pub fn prepare(search: &mut kiln_cxx::IncludeSearch) {
    search.compiler = Some(kiln_cxx::Compiler::Nvrtc);
    search.toolkit = include_folders();
}

/// The CUDA version of the toolkit's headers in `folder`, `(major,
/// minor)`, from `CUDART_VERSION` in its `cuda_runtime_api.h`; `None` when
/// it does not say. Headers of another major version than NVRTC's do not
/// compile with it.
pub fn version(folder: &Path) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(folder.join("cuda_runtime_api.h")).ok()?;
    let number: u32 = text.lines().find_map(|line| {
        line.trim()
            .strip_prefix("#define CUDART_VERSION")?
            .trim()
            .parse()
            .ok()
    })?;
    Some((number / 1000, number % 1000 / 10))
}

/// The variable that names the toolkit's include folder.
pub const INCLUDE_VARIABLE: &str = "KILN_CUDA_INCLUDE";

/// The header whose presence marks a toolkit's include folder.
const MARKER: &str = "cuda_runtime.h";

/// The toolkit's include folder, found once per process as the module's
/// documentation says; `None` when there is none.
pub fn include_folder() -> Option<&'static Path> {
    static FOLDER: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let nvrtc_file = crate::library::nvrtc().ok().map(|library| {
                library
                    .file()
                    .map_or_else(|| PathBuf::from(library.origin()), Path::to_path_buf)
            });
            find(
                std::env::var_os(INCLUDE_VARIABLE).map(PathBuf::from),
                &["CUDA_HOME", "CUDA_PATH"]
                    .iter()
                    .filter_map(std::env::var_os)
                    .filter(|root| !root.is_empty())
                    .map(|root| PathBuf::from(root).join("include"))
                    .collect::<Vec<_>>(),
                nvrtc_file.as_deref(),
            )
        })
        .as_deref()
}

/// The folder among the candidates, in the module's order.
fn find(configured: Option<PathBuf>, roots: &[PathBuf], nvrtc: Option<&Path>) -> Option<PathBuf> {
    if let Some(configured) = configured.filter(|folder| !folder.as_os_str().is_empty()) {
        return Some(configured);
    }
    let mut candidates = roots.to_vec();
    // `nvidia/<part>/lib/libnvrtc.so.13`: every `nvidia/*/include`.
    if let Some(parts) = nvrtc.and_then(|file| {
        fs_canonical(file)
            .parent()?
            .parent()?
            .parent()
            .map(Path::to_path_buf)
    }) && let Ok(entries) = std::fs::read_dir(&parts)
    {
        let mut beside: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("include"))
            .collect();
        beside.sort();
        candidates.extend(beside);
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates
        .into_iter()
        .find(|folder| folder.join(MARKER).is_file())
}

fn fs_canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_beside_nvidias_nvrtc_wheel_is_found_and_the_variable_wins() {
        let root = std::env::temp_dir().join(format!("kiln-cuda-toolkit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let lib = root.join("nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).expect("folders");
        std::fs::create_dir_all(root.join("nvidia/cu13/include")).expect("folders");
        std::fs::write(lib.join("libnvrtc.so.13"), "").expect("a file");
        let nvrtc = lib.join("libnvrtc.so.13");
        // Not beside the wheel yet (a machine with a toolkit in
        // /usr/local/cuda may still answer that one).
        assert!(
            find(None, &[], Some(&nvrtc)).is_none_or(|found| !found.starts_with(&root)),
            "no cuda_runtime.h beside the wheel yet"
        );
        std::fs::write(root.join("nvidia/cu13/include").join(MARKER), "").expect("a file");
        let found = find(None, &[], Some(&nvrtc)).expect("beside the wheel");
        assert!(
            found.ends_with("nvidia/cu13/include"),
            "{}",
            found.display()
        );
        std::fs::write(
            found.join("cuda_runtime_api.h"),
            "#ifndef X\n#define CUDART_VERSION 13000\n#endif\n",
        )
        .expect("a file");
        assert_eq!(version(&found), Some((13, 0)));
        assert_eq!(
            find(Some(PathBuf::from("/elsewhere")), &[], Some(&nvrtc)),
            Some(PathBuf::from("/elsewhere"))
        );
        let _ = std::fs::remove_dir_all(root);
    }
}
