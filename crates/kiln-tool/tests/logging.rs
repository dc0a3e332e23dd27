//! What the library says reaches standard error through the command's
//! logger: warnings by default, each once, more with `-v` or `KILN_LOG`,
//! none with `-q`.

mod support;

use std::path::Path;

use support::{Finished, Scratch, finish, kiln, kiln_lines, wgsl_kernel};

/// Variables set for one run, each with its value.
type Variables<'a> = &'a [(&'a str, &'a str)];

/// `kiln --dir STORE ARGUMENTS... FOLDER` with `variables` set, run to its
/// end.
fn warm(store: &Path, arguments: &[&str], folder: &Path, variables: Variables) -> Finished {
    finish(
        kiln(store, arguments)
            .arg(folder)
            .envs(variables.iter().copied()),
    )
}

/// Runs `act` on every file below `folder` of the store at `root`; how
/// many files there were.
fn each_file(root: &Path, folder: &str, mut act: impl FnMut(&Path)) -> usize {
    let mut count = 0;
    let mut folders = vec![root.join(folder)];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a folder of the store") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else {
                act(&path);
                count += 1;
            }
        }
    }
    count
}

/// Overwrites every record file of the store at `root` with bytes that are
/// no record.
fn damage_records(root: &Path) -> usize {
    each_file(root, "records", |path| {
        std::fs::write(path, b"not a record").expect("damaged");
    })
}

/// Removes every object file of the store at `root`; how many there were.
fn remove_objects(root: &Path) -> usize {
    each_file(root, "objects", |path| {
        std::fs::remove_file(path).expect("removed");
    })
}

/// Checks `run` succeeded with no line of kiln's on standard error.
fn said_nothing(run: &Finished, why: &str) {
    run.succeeded_json();
    assert!(kiln_lines(&run.stderr).is_empty(), "{why}: {}", run.stderr);
}

// P2
#[test]
fn a_damaged_entry_is_a_warning_on_standard_error_once_and_quiet_hides_it() {
    let scratch = Scratch::new("log-damaged");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("one.wgsl"), wgsl_kernel(1)).expect("a kernel file");
    let store = scratch.join("store");
    // Its entries are files: the test damages the record files.
    let first = warm(
        &store,
        &["--json", "warm"],
        &folder,
        &[("KILN_CACHE_PACK_BELOW", "0")],
    );
    said_nothing(&first, "nothing to say");

    assert!(damage_records(&store) > 0, "the run stored records");
    let second = warm(&store, &["--json", "warm"], &folder, &[]);
    let report = second.succeeded_json();
    assert_eq!(report["backends"][0]["compiled"], 1, "{report:#}");
    let lines = kiln_lines(&second.stderr);
    assert!(
        !lines.is_empty()
            && lines
                .iter()
                .all(|line| line.starts_with("kiln: warning: ") && line.contains("removed")),
        "the damaged entries are warned of: {}",
        second.stderr
    );
    let mut distinct = lines.clone();
    distinct.dedup();
    assert_eq!(distinct, lines, "each message once: {}", second.stderr);

    let hidden: [(&[&str], Variables, &str); 2] = [
        (&["--json", "-q", "warm"], &[], "-q shows no warning"),
        (
            &["--json", "warm"],
            &[("KILN_LOG", "off")],
            "KILN_LOG=off shows nothing",
        ),
    ];
    for (arguments, variables, why) in hidden {
        damage_records(&store);
        said_nothing(&warm(&store, arguments, &folder, variables), why);
    }
}

// P5
#[test]
fn kiln_log_and_verbose_flags_show_a_module_s_debugging_lines() {
    // A store asked to be read-only says so at debug level only.
    let scratch = Scratch::new("log-levels");
    let folder = scratch.folder("kernels");
    std::fs::write(folder.join("one.wgsl"), wgsl_kernel(2)).expect("a kernel file");
    let store = scratch.join("store");
    warm(&store, &["--json", "warm"], &folder, &[]).succeeded_json();
    let said = |arguments: &[&str], log: Option<&str>| {
        let mut command = kiln(&store, arguments);
        command.arg(&folder).env("KILN_CACHE_READ_ONLY", "1");
        match log {
            Some(log) => command.env("KILN_LOG", log),
            None => command.env_remove("KILN_LOG"),
        };
        let run = finish(&mut command);
        run.succeeded_json();
        run.stderr
            .lines()
            .any(|line| line.starts_with("kiln: debug: kiln_store") && line.contains("only"))
    };
    assert!(!said(&["--json", "warm"], None), "not by default");
    assert!(said(&["--json", "warm"], Some("kiln_store=debug")));
    assert!(
        !said(
            &["--json", "warm"],
            Some("kiln_store=debug,kiln_store::disk=warn")
        ),
        "the longest module wins"
    );
    assert!(said(&["--json", "-vv", "warm"], None));
    assert!(!said(&["--json", "-v", "warm"], None), "-v is notes only");
    // A directive that does not parse is named, and the run goes on.
    let run = warm(
        &store,
        &["--json", "warm"],
        &folder,
        &[("KILN_LOG", "kiln_store=loud")],
    );
    run.succeeded_json();
    assert!(
        run.stderr
            .contains("KILN_LOG: \"kiln_store=loud\" is not a directive"),
        "{}",
        run.stderr
    );
}

// P2
#[test]
fn a_record_whose_object_is_gone_is_said_at_verbose() {
    let scratch = Scratch::new("log-object-gone");
    let folder = scratch.folder("kernels");
    // Large enough that its record points at its object rather than
    // carrying a copy of it.
    let mut text = wgsl_kernel(1);
    while text.len() < 96 << 10 {
        text.push_str("// padding, to give the artifact some size\n");
    }
    std::fs::write(folder.join("one.wgsl"), text).expect("a kernel file");
    let store = scratch.join("store");
    warm(&store, &["--json", "warm"], &folder, &[]).succeeded_json();
    for verbose in [false, true] {
        assert!(remove_objects(&store) > 0, "the run stored its object");
        let arguments: &[&str] = if verbose {
            &["--json", "warm", "-v"]
        } else {
            &["--json", "warm"]
        };
        let run = warm(&store, arguments, &folder, &[]);
        let report = run.succeeded_json();
        assert_eq!(report["backends"][0]["compiled"], 1, "{report:#}");
        let said = kiln_lines(&run.stderr)
            .iter()
            .any(|line| line.contains("which is gone"));
        assert_eq!(said, verbose, "said at -v only: {}", run.stderr);
    }
}
