//! The test loop of a test binary with its own `main` (`harness = false`),
//! as the binaries that are their own compile workers have: each test run
//! in turn, a panic its failure, the arguments that are not options taken
//! as name filters, and libtest's `test result:` line printed, so that
//! `cargo test` and `cargo xtask test` count it.

/// Runs `tests` (name, test) and exits the process: status 1 when any
/// failed.
pub fn run(tests: &[(&str, fn())]) -> ! {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let (mut passed, mut failed, mut filtered) = (0, 0, 0);
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|filter| name.contains(filter.as_str())) {
            filtered += 1;
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored; 0 measured; \
         {filtered} filtered out\n"
    );
    std::process::exit(i32::from(failed > 0));
}
