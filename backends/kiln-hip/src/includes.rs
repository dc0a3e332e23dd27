//! What hipRTC is handed for a kernel's includes: every header it reads
//! is one kiln resolved and keyed (P13).
//!
//! hipRTC, left to itself, searches `CPATH`, `CPLUS_INCLUDE_PATH` and the
//! system's include folder (ROCm's `/usr/include/hip/...` among them) for
//! any include it is not handed, and those bytes are in no key. So kiln
//! hands it an answer for every include of the text and its headers: a
//! header kiln read, a stand-in for a standard header (B8), a stand-in
//! for hipRTC's own `hip/` headers (its built-in header, which every
//! hipRTC compile includes first, declares what they would), or a header
//! that stops the compile with an `#error` naming the include. hipRTC
//! finds the headers it is handed before any folder of its own, so it
//! never reaches one.

use kiln_cxx::{Compiler, Header, IncludeSearch};

/// The `hip/` headers hipRTC's built-in header stands for.
const BUILT_IN: [&str; 8] = [
    "hip/hip_runtime.h",
    "hip/hip_runtime_api.h",
    "hip/hip_fp16.h",
    "hip/hip_vector_types.h",
    "hip/math_functions.h",
    "hip/device_functions.h",
    "hip/hip_common.h",
    "hip/hip_version.h",
];

/// hipRTC's answers for its own headers, by name.
pub fn compiler_headers() -> Vec<Header> {
    BUILT_IN
        .iter()
        .map(|name| {
            Header::new(
                *name,
                format!(
                    "// kiln: <{name}> is hipRTC's own: its built-in header, which every hipRTC \
                     compile includes first, declares what it would\n#pragma once\n"
                ),
            )
        })
        .collect()
}

/// Sets `search` up for hipRTC: its own headers and its stand-ins.
pub fn prepare(search: &mut IncludeSearch) {
    search.compiler = Some(Compiler::Hiprtc);
    search.compiler_folders = vec!["hip".to_owned()];
    search.compiler_headers = compiler_headers();
}

/// The answers `source` and `headers` still lack: a stand-in for each
/// include of theirs that no header answers, so that hipRTC searches no
/// folder of its own. A fixed source's includes were resolved when its
/// kernel was built, so only a generated source's can lack any.
///
/// # Errors
///
/// An include that cannot be answered (an absolute path, a computed
/// name, or one found nowhere outside any `#if`), in words.
pub fn close(source: &str, headers: &[Header], label: &str) -> Result<Vec<Header>, String> {
    let mut search = IncludeSearch::new();
    prepare(&mut search);
    search
        .resolve(source, label, headers)
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // P13: nothing is left to hipRTC's own search.
    #[test]
    fn every_include_gets_an_answer_and_hipruntime_its_stand_in() {
        let text = "#include \"hip/hip_runtime.h\"\n#include <hip/hip_fp16.h>\n\
                    #if defined(NEVER)\n#include \"decoy.h\"\n#endif\n#include \"given.h\"\n";
        let given = [Header::new(
            "given.h",
            "#ifdef X\n#include <other.h>\n#endif\n",
        )];
        let added = close(text, &given, "k.hip").expect("answers");
        let names: Vec<&str> = added.iter().map(|header| header.name.as_str()).collect();
        assert_eq!(
            names,
            ["decoy.h", "hip/hip_fp16.h", "hip/hip_runtime.h", "other.h"]
        );
        assert!(added[0].text.starts_with("#error"), "{}", added[0].text);
        let error = close("#include \"lost.h\"\n", &[], "k.hip").expect_err("unconditional");
        assert!(
            error.contains("`lost.h` is in no include folder"),
            "{error}"
        );
        assert!(!error.contains("KILN_CUDA_INCLUDE"), "{error}");
    }
}
