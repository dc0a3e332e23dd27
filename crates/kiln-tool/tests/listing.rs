//! `kiln ls` on a store of real entries (lavapipe's wgpu, and NVRTC's CUDA
//! where NVRTC is found): one line an entry when the output is no
//! terminal, rows in order, one row per specialization showing what it
//! was compiled with, and a filter that matches nothing saying so (D4).

mod support;

use std::path::Path;

use kiln_engine::conformance::skip;
use support::{Scratch, finish, kiln};

/// How many specializations each kernel file has.
const SPECIALIZATIONS: u32 = 20;

/// A WGSL kernel with an override constant, specialized
/// [`SPECIALIZATIONS`] times.
fn specialized_wgsl() -> String {
    let mut text = String::new();
    for scale in 1..=SPECIALIZATIONS {
        text.push_str(&format!("// kiln specialize: SCALE={scale}\n"));
    }
    text.push_str(
        "@group(0) @binding(0) var<storage, read_write> data: array<u32>;\n\
         override SCALE: u32 = 1u;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) { data[id.x] = id.x * SCALE; }\n",
    );
    text
}

/// A CUDA saxpy specialized [`SPECIALIZATIONS`] times by its defines.
fn specialized_saxpy() -> String {
    let mut text = String::from("// kiln entry: saxpy\n");
    for n in 1..=SPECIALIZATIONS {
        text.push_str(&format!(
            "// kiln specialize: N={n} BLOCK={} TYPE=float\n",
            n * 32
        ));
    }
    text.push_str(
        "extern \"C\" __global__ void saxpy(float a, float* x, float* y) {\n\
         int i = blockIdx.x * BLOCK + threadIdx.x; if (i < N) y[i] = a * x[i] + y[i]; }\n",
    );
    text
}

/// Whether NVRTC can be used here, or why not.
fn nvrtc() -> Result<(), String> {
    kiln_cuda::CudaCompiler::new()
        .map(drop)
        .map_err(|error| error.to_string())
}

/// The rows of `table` whose text starts with `start`, each with the
/// lines its wrapped cells continue on joined to it: a row starts on a
/// line with a TARGET cell, which is never empty.
fn rows_of(table: &str, start: &str) -> Vec<String> {
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    let target = header.find("TARGET").expect("a TARGET column");
    let mut rows: Vec<String> = Vec::new();
    for line in lines {
        let starts_a_row = line
            .get(target..)
            .is_some_and(|rest| rest.starts_with(|c: char| !c.is_whitespace()));
        match rows.last_mut() {
            Some(row) if !starts_a_row => {
                row.push(' ');
                row.push_str(line.trim());
            }
            _ => rows.push(line.to_owned()),
        }
    }
    rows.retain(|row| row.starts_with(start));
    rows
}

/// The numbers after `name=` in `rows`, in their order.
fn values_of(rows: &[String], name: &str) -> Vec<u32> {
    rows.iter()
        .filter_map(|row| {
            row.split_whitespace()
                .find_map(|word| word.strip_prefix(&format!("{name}=")))
                .and_then(|value| value.parse().ok())
        })
        .collect()
}

/// Warms `folder` into `store` with `backends`.
fn warm(store: &Path, folder: &Path, options: &[&str]) {
    let run = finish(kiln(store, &["--json", "warm"]).args(options).arg(folder));
    run.succeeded_json();
}

// D4
#[test]
fn ls_in_a_pipe_is_one_line_an_entry_sorted_with_one_row_per_specialization() {
    let scratch = Scratch::new("ls-table");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("scale.wgsl"), specialized_wgsl()).expect("a kernel file");
    for number in 0..3 {
        std::fs::write(
            folder.join(format!("plain{number}.wgsl")),
            support::wgsl_kernel(number),
        )
        .expect("a kernel file");
    }
    let cuda = match nvrtc() {
        Ok(()) => {
            std::fs::write(folder.join("saxpy.cu"), specialized_saxpy()).expect("a kernel file");
            true
        }
        Err(why) => {
            skip("listing CUDA kernels specialized by their defines", &why);
            false
        }
    };
    let store = scratch.join("store");
    if cuda {
        warm(
            &store,
            &folder,
            &["--backend", "wgpu,cuda", "--cuda-arch", "sm_90"],
        );
    } else {
        warm(&store, &folder, &["--backend", "wgpu"]);
    }

    // Standard output is a pipe here: no width limit, one line an entry
    // (the 80-column terminal is tests/terminal.rs').
    let listed = finish(&mut kiln(&store, &["ls"]));
    assert!(listed.status.success(), "{}", listed.stderr);
    let table = &listed.stdout;
    let entries = finish(&mut kiln(&store, &["--json", "ls"])).json();
    assert_eq!(
        table.lines().count(),
        1 + entries.as_array().map_or(0, Vec::len),
        "a header and one line an entry:\n{table}"
    );
    let header = table.lines().next().unwrap_or_default();
    for column in ["ENTRY", "TARGET", "COMPILER", "SIZE", "STORED", "USED"] {
        assert!(header.contains(column), "{table}");
    }

    // One row per specialization, each showing its constant, in order of
    // its value; the kernel files in order of their names.
    let scaled = rows_of(table, "warm/scale.wgsl#");
    assert_eq!(
        values_of(&scaled, "SCALE"),
        (1..=SPECIALIZATIONS).collect::<Vec<_>>(),
        "{table}"
    );
    let kernels: Vec<String> = rows_of(table, "warm/")
        .into_iter()
        .map(|row| row.split('#').next().unwrap_or_default().to_owned())
        .collect();
    let mut sorted = kernels.clone();
    sorted.sort_unstable();
    assert_eq!(kernels, sorted, "rows sorted by kernel:\n{table}");
    if cuda {
        let saxpy = rows_of(table, "warm/saxpy.cu#");
        assert_eq!(
            values_of(&saxpy, "N"),
            (1..=SPECIALIZATIONS).collect::<Vec<_>>(),
            "one row per set of defines:\n{table}"
        );
        assert!(
            saxpy
                .iter()
                .all(|row| row.contains("cuda sm_90") && row.contains("nvrtc ")),
            "{table}"
        );
        assert!(
            !table.contains("blake3:") && !table.contains("artifact "),
            "the compiler column is short:\n{table}"
        );
    }

    // --wide: every row on one line, every compiler whole.
    let wide = finish(&mut kiln(&store, &["ls", "--wide"]));
    assert!(wide.status.success(), "{}", wide.stderr);
    let json = finish(&mut kiln(&store, &["--json", "ls"])).succeeded_json();
    let entries = json.as_array().map_or(0, Vec::len);
    assert_eq!(
        wide.stdout.lines().count(),
        entries + 1,
        "a header and a line per entry:\n{}",
        wide.stdout
    );
    assert!(wide.stdout.contains("artifact "), "{}", wide.stdout);

    // A filter that matches nothing says so; the store is not empty.
    let none = finish(&mut kiln(&store, &["ls", "--kernel", "no-such-kernel"]));
    assert!(none.status.success(), "{}", none.stderr);
    assert!(
        none.stdout.contains("matches --kernel \"no-such-kernel\"")
            && !none.stdout.contains("holds no entries"),
        "{}",
        none.stdout
    );
}
