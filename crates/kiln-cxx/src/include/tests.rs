//! The include search's tests.

use super::*;

fn folder() -> PathBuf {
    let folder = std::env::temp_dir().join(format!(
        "kiln-cxx-include-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = fs::remove_dir_all(&folder);
    fs::create_dir_all(&folder).expect("a scratch folder");
    folder
}

#[test]
fn directives_are_found_outside_comments_with_their_condition() {
    let text = "#ifndef A_H\n#define A_H\n#include \"a.h\"\n// #include \"b.h\"\n\
                /* #include \"c.h\"\n */ # include <d.h>\n#ifdef X\n#include <e.h>\n#endif\n\
                #include NAME\n#endif\n";
    let found = directives(text);
    let targets: Vec<(Target, bool)> = found
        .into_iter()
        .map(|directive| (directive.target, directive.conditional))
        .collect();
    assert_eq!(
        targets,
        [
            (Target::Quoted("a.h".into()), false),
            (Target::Angle("d.h".into()), false),
            (Target::Angle("e.h".into()), true),
            (Target::Computed("NAME".into()), false),
        ]
    );
}

// P13
#[test]
fn quoted_includes_look_beside_the_file_first_and_follow_headers() {
    let root = folder();
    fs::create_dir_all(root.join("kernels/sub")).expect("folders");
    fs::create_dir_all(root.join("include")).expect("folders");
    fs::write(root.join("kernels/common.h"), "#include \"sub/more.h\"\n").expect("a header");
    fs::write(root.join("kernels/sub/more.h"), "#include \"deep.h\"\n").expect("a header");
    fs::write(root.join("kernels/sub/deep.h"), "#define DEEP 1\n").expect("a header");
    fs::write(root.join("include/common.h"), "#define WRONG 1\n").expect("a header");
    fs::write(root.join("include/lib.h"), "#define LIB 1\n").expect("a header");
    let search = IncludeSearch {
        source_folder: Some(root.join("kernels")),
        folders: vec![root.join("include")],
        ..IncludeSearch::default()
    };
    let headers = search
        .resolve("#include \"common.h\"\n#include <lib.h>\n", "k.cu", &[])
        .expect("resolves");
    let names: Vec<(&str, &str)> = headers
        .iter()
        .map(|header| (header.name.as_str(), header.text.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("common.h", "#include \"sub/more.h\"\n"),
            ("deep.h", "#define DEEP 1\n"),
            ("lib.h", "#define LIB 1\n"),
            ("sub/more.h", "#include \"deep.h\"\n"),
        ]
    );
    let _ = fs::remove_dir_all(root);
}

// P13
#[test]
fn an_include_found_nowhere_names_the_folders_searched() {
    let root = folder();
    let search = IncludeSearch {
        source_folder: Some(root.clone()),
        folders: vec![root.join("include")],
        compiler_folders: vec!["hip".to_owned()],
        ..IncludeSearch::default()
    };
    search
        .resolve("#include <hip/hip_runtime.h>\n", "k.hip", &[])
        .expect("the compiler's own header is left to it");
    let error = search
        .resolve("\n#include \"missing.h\"\n", "k.cu", &[])
        .expect_err("missing");
    let message = error.to_string();
    assert!(message.starts_with("k.cu line 2: `missing.h`"), "{message}");
    assert!(message.contains(&root.display().to_string()), "{message}");
    assert!(message.contains("--include DIR"), "{message}");
    // Under a conditional, it is the compiler's to decide.
    search
        .resolve(
            "#ifndef __CUDACC_RTC__\n#include <cstdio>\n#endif\n",
            "k.cu",
            &[],
        )
        .expect("a conditional include is left to the compiler");
    let _ = fs::remove_dir_all(root);
}

// P13: `..` cannot leave the tree, not even under `#if 0`, and the file
// outside is never read.
#[test]
fn an_include_outside_the_tree_is_refused_unread_unless_allowed() {
    let root = folder();
    fs::create_dir_all(root.join("tree/kernels")).expect("folders");
    fs::create_dir_all(root.join("tree/include")).expect("folders");
    fs::write(root.join("tree/include/tiles.h"), "#define T 1\n").expect("a header");
    fs::write(root.join("secret.h"), "secret\n").expect("a file outside");
    let mut search = IncludeSearch {
        source_folder: Some(root.join("tree/kernels")),
        tree: Some(root.join("tree")),
        ..IncludeSearch::default()
    };
    let headers = search
        .resolve("#include \"../include/tiles.h\"\n", "k.cu", &[])
        .expect("inside the tree");
    assert_eq!(headers[0].name, "../include/tiles.h");
    for text in [
        "#include \"../../secret.h\"\n",
        "#if 0\n#include \"../../secret.h\"\n#endif\n",
    ] {
        let error = search.resolve(text, "k.cu", &[]).expect_err("outside");
        assert!(matches!(error, IncludeError::Outside { .. }), "{error}");
        assert!(
            error.to_string().contains("kiln does not read it"),
            "{error}"
        );
    }
    // Without a tree, the tree is the source folder.
    search.tree = None;
    search
        .resolve("#include \"../include/tiles.h\"\n", "k.cu", &[])
        .expect_err("outside the source folder");
    search.outside_allowed = true;
    let headers = search
        .resolve("#include \"../../secret.h\"\n", "k.cu", &[])
        .expect("allowed");
    assert_eq!(headers[0].text, "secret\n");
    let _ = fs::remove_dir_all(root);
}

// P13: no include is left to the compiler; a skipped branch need not
// resolve, nor need a header reached only through one.
#[test]
fn an_include_found_nowhere_under_a_conditional_gets_a_stopping_stand_in() {
    let root = folder();
    fs::write(
        root.join("optional.h"),
        "#include \"deeper_missing.h\"\n#include <cstdint>\n",
    )
    .expect("a header");
    let search = IncludeSearch {
        source_folder: Some(root.clone()),
        compiler: Some(Compiler::Hiprtc),
        ..IncludeSearch::default()
    };
    let text = "#ifdef EXTRA\n#include \"missing.h\"\n#include \"optional.h\"\n#endif\n";
    let headers = search.resolve(text, "k.hip", &[]).expect("resolves");
    let names: Vec<&str> = headers.iter().map(|header| header.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "climits",
            "cstdint",
            "deeper_missing.h",
            "missing.h",
            "optional.h"
        ]
    );
    for stopping in [&headers[2], &headers[3]] {
        assert!(stopping.text.starts_with("#error"), "{}", stopping.text);
        assert!(stopping.text.contains(&stopping.name), "{}", stopping.text);
    }
    assert!(headers[1].text.contains("int8_t"), "{}", headers[1].text);
    let _ = fs::remove_dir_all(root);
}

// B8
#[test]
fn a_host_only_header_says_what_it_is_and_stand_ins_can_be_turned_off() {
    let mut search = IncludeSearch {
        compiler: Some(Compiler::Nvrtc),
        ..IncludeSearch::default()
    };
    let error = search
        .resolve("#include <cublas_v2.h>\n", "k.cu", &[])
        .expect_err("host only");
    let message = error.to_string();
    assert!(message.contains("host-only header (cuBLAS"), "{message}");
    assert!(message.contains("#ifndef __CUDACC_RTC__"), "{message}");
    assert!(!message.contains("--include"), "{message}");
    search
        .resolve("#include <climits>\n", "k.cu", &[])
        .expect("a stand-in");
    search.stdlib_off = true;
    let error = search
        .resolve("#include <climits>\n", "k.cu", &[])
        .expect_err("off");
    assert!(matches!(error, IncludeError::NotFound { .. }), "{error}");
}

// P13
#[test]
fn a_computed_include_is_refused_and_a_supplied_header_wins() {
    let error = IncludeSearch::new()
        .resolve("#define H \"a.h\"\n#include H\n", "k.cu", &[])
        .expect_err("computed");
    assert!(matches!(error, IncludeError::Computed { .. }), "{error}");
    let supplied = [Header::new("a.h", "#define A 1\n")];
    let headers = IncludeSearch::new()
        .resolve("#include \"a.h\"\n", "k.cu", &supplied)
        .expect("supplied");
    assert!(headers.is_empty(), "a supplied header is not read again");
}

// A cache answers a text resolved before with the same search from memory,
// and another text or another search afresh.
#[test]
fn a_cache_answers_the_same_text_and_search_without_reading_again() {
    let root = folder();
    fs::write(root.join("a.h"), "#define A 1\n").expect("a header");
    let cache = IncludeCache::new();
    let search = IncludeSearch {
        source_folder: Some(root.clone()),
        cache: Some(cache.clone()),
        ..IncludeSearch::default()
    };
    let text = "#include \"a.h\"\n";
    let first = search.resolve(text, "k.cu", &[]).expect("resolves");
    assert_eq!(first, [Header::new("a.h", "#define A 1\n")]);
    fs::write(root.join("a.h"), "#define A 2\n").expect("a header");
    assert_eq!(search.resolve(text, "k.cu", &[]), Ok(first), "from memory");
    let afresh = IncludeSearch {
        cache: None,
        ..search.clone()
    };
    assert_eq!(
        afresh.resolve(text, "k.cu", &[]),
        Ok(vec![Header::new("a.h", "#define A 2\n")])
    );
    let elsewhere = IncludeSearch {
        folders: vec![root.join("none")],
        ..search.clone()
    };
    assert_eq!(
        elsewhere.resolve(text, "k.cu", &[]),
        Ok(vec![Header::new("a.h", "#define A 2\n")]),
        "another search is resolved afresh"
    );
    assert_eq!(
        search.resolve("#include \"a.h\"\n\n", "k.cu", &[]),
        Ok(vec![Header::new("a.h", "#define A 2\n")]),
        "another text is resolved afresh"
    );
    let _ = fs::remove_dir_all(root);
}
