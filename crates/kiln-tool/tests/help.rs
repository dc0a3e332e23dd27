//! What `--help` says of the variables options read, and that the options
//! read them: clap's `env`, with the values never shown (a remote's URL
//! may hold a password); the global options described once, by `--help`.

mod support;

use std::process::Command;

use support::{KILN, Scratch, filled, finish};

/// `kiln ARGUMENTS...` with `variables` set.
fn kiln_with(arguments: &[&str], variables: &[(&str, &str)]) -> support::Finished {
    let mut command = Command::new(KILN);
    command
        .args(arguments)
        .env_remove("KILN_CACHE_DIR")
        .env_remove("KILN_CACHE_DISABLE")
        .env_remove("KILN_CACHE_MAX_SIZE")
        .env_remove("KILN_CACHE_MAX_ENTRIES")
        .env_remove("KILN_REMOTE_URL");
    for (variable, value) in variables {
        command.env(variable, value);
    }
    finish(&mut command)
}

#[test]
fn help_names_each_option_s_variable_without_its_value() {
    let secret = "redis://:hunter2@remote.example:6379";
    let variables = [
        ("KILN_REMOTE_URL", secret),
        ("KILN_CACHE_DIR", "/somewhere/else"),
    ];
    for (arguments, variable) in [
        (&["stats", "--help"][..], "[env: KILN_REMOTE_URL]"),
        (&["stats", "--help"], "[env: KILN_CACHE_DIR]"),
        (&["gc", "--help"], "[env: KILN_CACHE_MAX_SIZE]"),
        (&["gc", "--help"], "[env: KILN_CACHE_MAX_ENTRIES]"),
        (&["--help"], "[env: KILN_CACHE_DIR]"),
        (&["warm", "--help"], "[env: KILN_REMOTE_URL]"),
        (&["warm", "--help"], "[env: KILN_RETRY_FAILED]"),
        (&["push", "--help"], "[env: KILN_REMOTE_URL]"),
        (&["pull", "--help"], "[env: KILN_REMOTE_URL]"),
    ] {
        let help = kiln_with(arguments, &variables);
        assert!(help.status.success(), "{help:?}");
        assert!(
            help.stdout.contains(variable),
            "{arguments:?}: {}",
            help.stdout
        );
        assert!(
            !help.stdout.contains("hunter2") && !help.stdout.contains("/somewhere/else"),
            "no value shown: {}",
            help.stdout
        );
    }
}

#[test]
fn short_help_shows_a_command_s_own_options_and_names_the_global_ones() {
    let short = kiln_with(&["ls", "-h"], &[]);
    assert!(short.status.success(), "{short:?}");
    assert!(short.stdout.contains("--kernel"), "{}", short.stdout);
    assert!(
        !short.stdout.contains("--dir <DIR>") && !short.stdout.contains("Print JSON"),
        "the global options are not described again: {}",
        short.stdout
    );
    assert!(
        short.stdout.contains("Global options: --dir DIR, --json"),
        "{}",
        short.stdout
    );
    let long = kiln_with(&["ls", "--help"], &[]);
    assert!(long.stdout.contains("--dir <DIR>"), "{}", long.stdout);
    assert!(long.stdout.contains("Print JSON"), "{}", long.stdout);
}

#[test]
fn gc_takes_its_limits_from_the_variables_and_refuses_a_bad_one_as_usage() {
    let scratch = Scratch::new("help-env");
    let root = scratch.join("store");
    drop(filled(&root, 4));
    let root_text = root.to_str().expect("a UTF-8 path");
    // KILN_CACHE_MAX_ENTRIES reaches `--max-entries`.
    let collected = kiln_with(
        &["--dir", root_text, "--json", "gc"],
        &[("KILN_CACHE_MAX_ENTRIES", " 2 ")],
    )
    .succeeded_json();
    assert_eq!(collected["after"]["entries"], 2, "{collected:#}");
    // A variable that is no size is the command line's mistake: exit 2,
    // naming the option it feeds.
    let refused = kiln_with(
        &["--dir", root_text, "gc"],
        &[("KILN_CACHE_MAX_SIZE", "lots")],
    );
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("--max-size") && refused.stderr.contains("512M"),
        "{}",
        refused.stderr
    );
    // --dir still wins over KILN_CACHE_DIR, and KILN_CACHE_DIR is the
    // configured store KILN_CACHE_DISABLE turns off.
    let listed = kiln_with(
        &["--dir", root_text, "--json", "stats"],
        &[("KILN_CACHE_DIR", "/nonexistent/kiln")],
    )
    .succeeded_json();
    assert_eq!(listed["root"], root_text, "{listed:#}");
    let disabled = kiln_with(
        &["stats"],
        &[("KILN_CACHE_DIR", root_text), ("KILN_CACHE_DISABLE", "1")],
    );
    assert_eq!(disabled.status.code(), Some(1), "{disabled:?}");
    assert!(disabled.stderr.contains("disabled"), "{}", disabled.stderr);
    let configured = kiln_with(&["--json", "stats"], &[("KILN_CACHE_DIR", root_text)]);
    assert_eq!(configured.succeeded_json()["entries"], 2);
}

// B3: `--retry-failed` reads KILN_RETRY_FAILED as a program's loader does;
// the human report counts one file and one kernel in the singular.
#[test]
fn warm_takes_retry_failed_from_its_variable_and_refuses_a_bad_one_as_usage() {
    let scratch = Scratch::new("help-retry");
    let root = scratch.join("store");
    let kernels = scratch.join("kernels");
    std::fs::create_dir_all(&kernels).expect("the scratch folder is writable");
    std::fs::write(kernels.join("one.wgsl"), support::wgsl_kernel(1)).expect("writable");
    let root_text = root.to_str().expect("a UTF-8 path");
    let kernels_text = kernels.to_str().expect("a UTF-8 path");
    let arguments = [
        "--dir",
        root_text,
        "warm",
        "--progress",
        "never",
        kernels_text,
    ];
    let refused = kiln_with(&arguments, &[("KILN_RETRY_FAILED", "maybe")]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("--retry-failed") && refused.stderr.contains("1, true, 0 or false"),
        "{}",
        refused.stderr
    );
    for value in ["1", "0", ""] {
        let warmed = kiln_with(&arguments, &[("KILN_RETRY_FAILED", value)]);
        assert!(
            warmed.status.success(),
            "KILN_RETRY_FAILED={value:?}: {warmed:?}"
        );
        assert!(
            warmed.stdout.starts_with("1 file, 1 kernel in "),
            "{}",
            warmed.stdout
        );
    }
}
