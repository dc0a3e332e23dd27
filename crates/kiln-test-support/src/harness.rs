//! The test loop of a test binary with its own `main` (`harness = false`),
//! as the binaries that are their own compile workers have: each test run
//! in turn, a panic its failure, the arguments that are not options taken
//! as name filters (whole names under `--exact`), `--list` answered as
//! libtest answers it (the names, nothing run), and libtest's `test
//! result:` line printed, so that `cargo test`, `cargo test -- --list` and
//! `cargo xtask test` count it.

/// What the command line asks of the binary.
#[derive(Debug, Default, PartialEq, Eq)]
struct Request {
    /// Name the tests instead of running them.
    list: bool,
    /// `--format terse`: the list without its closing count.
    terse: bool,
    /// A filter matches a whole name, not a part of one.
    exact: bool,
    /// `--ignored`: only the ignored tests, of which these binaries have
    /// none.
    ignored_only: bool,
    /// The names (or parts of names) to run; none runs every test.
    filters: Vec<String>,
    /// `--skip`: names (or parts) not to run.
    skipped: Vec<String>,
}

impl Request {
    /// Reads libtest's arguments. The options that take a value (`--skip
    /// NAME`, `--test-threads 1`) take the next argument, so that a value
    /// is never read as a name filter; other options change nothing here.
    fn parse(arguments: impl IntoIterator<Item = String>) -> Self {
        const TAKING_A_VALUE: &[&str] = &[
            "--skip",
            "--test-threads",
            "--format",
            "--color",
            "--logfile",
            "-Z",
        ];
        let mut request = Self::default();
        let mut arguments = arguments.into_iter();
        while let Some(argument) = arguments.next() {
            let (option, inline_value) = match argument.split_once('=') {
                Some((option, value)) if option.starts_with('-') => {
                    (option.to_owned(), Some(value.to_owned()))
                }
                _ => (argument.clone(), None),
            };
            if !option.starts_with('-') {
                request.filters.push(argument);
                continue;
            }
            let value = if TAKING_A_VALUE.contains(&option.as_str()) {
                inline_value.or_else(|| arguments.next())
            } else {
                None
            };
            match (option.as_str(), value) {
                ("--list", _) => request.list = true,
                ("--exact", _) => request.exact = true,
                ("--ignored", _) => request.ignored_only = true,
                ("--skip", Some(name)) => request.skipped.push(name),
                ("--format", Some(format)) => request.terse = format == "terse",
                _ => {}
            }
        }
        request
    }

    /// Whether the test `name` is asked for.
    fn selects(&self, name: &str) -> bool {
        let matches = |filter: &String| {
            if self.exact {
                name == filter
            } else {
                name.contains(filter.as_str())
            }
        };
        !self.ignored_only
            && (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skipped.iter().any(matches)
    }
}

/// The table of tests [`run`] takes, each test named once: `tests![a, b]`
/// is `&[("a", a), ("b", b)]`, so a test's name is the name of its
/// function.
#[macro_export]
macro_rules! tests {
    ($($test:ident),+ $(,)?) => {
        &[$((stringify!($test), $test as fn())),+]
    };
}

/// Runs `tests` (name, test) and exits the process: status 1 when any
/// failed. Under `--list`, prints each selected name as libtest does
/// (`name: test`) and runs nothing.
pub fn run(tests: &[(&str, fn())]) -> ! {
    let request = Request::parse(std::env::args().skip(1));
    let selected: Vec<&(&str, fn())> = tests
        .iter()
        .filter(|(name, _)| request.selects(name))
        .collect();
    if request.list {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        if !request.terse {
            println!("\n{} tests, 0 benchmarks", selected.len());
        }
        std::process::exit(0);
    }
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in &selected {
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
    let filtered = tests.len() - selected.len();
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; 0 ignored; 0 measured; \
         {filtered} filtered out\n"
    );
    std::process::exit(i32::from(failed > 0));
}

#[cfg(test)]
mod tests {
    use super::Request;

    fn parse(arguments: &[&str]) -> Request {
        Request::parse(arguments.iter().map(|argument| (*argument).to_owned()))
    }

    #[test]
    fn list_lists_and_keeps_its_filters() {
        let request = parse(&["--list", "f2_"]);
        assert!(request.list, "{request:?}");
        assert_eq!(request.filters, ["f2_"]);
        assert!(request.selects("f2_a_batch"));
        assert!(!request.selects("l6_a_crash"));
        assert!(parse(&["--list", "--format", "terse"]).terse);
        assert!(parse(&["--list", "--format=terse"]).terse);
    }

    #[test]
    fn an_option_s_value_is_no_name_filter() {
        let request = parse(&["--test-threads", "1", "--skip", "slow", "--nocapture"]);
        assert!(request.filters.is_empty(), "{request:?}");
        assert!(request.selects("a_quick_test"));
        assert!(!request.selects("a_slow_test"));
        assert!(!parse(&["--test-threads=1"]).list);
    }

    #[test]
    fn exact_matches_whole_names_only() {
        let request = parse(&["--exact", "f2_a_batch", "--nocapture"]);
        assert!(request.selects("f2_a_batch"));
        assert!(!request.selects("f2_a_batch_in_workers"));
    }

    #[test]
    fn ignored_only_selects_nothing_here() {
        assert!(!parse(&["--ignored"]).selects("any_test"));
    }
}
