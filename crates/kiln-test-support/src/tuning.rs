//! What the tuning tests of every backend check of a measured answer
//! (T1, T3): the winner is the fastest candidate that worked, and no slow
//! or failed one. The backend's candidates are passed in by index.

use std::time::Duration;

use kiln_engine::tune::Tuned;

/// Asserts that `tuned`'s winner is none of `slow` or `failed` and no
/// slower than any candidate measured, prints it, and returns its time and
/// the fastest of `slow`'s (each backend checks how far apart they are).
pub fn assert_the_fastest_won<L>(
    tuned: &Tuned<L>,
    slow: &[usize],
    failed: &[usize],
) -> (Duration, Duration) {
    let answer = &tuned.answer;
    assert!(!slow.contains(&tuned.winner) && !failed.contains(&tuned.winner));
    let winner = answer.candidates[tuned.winner].time().expect("measured");
    for candidate in &answer.candidates {
        if let Some(time) = candidate.time() {
            assert!(winner <= time, "{} beat the winner", candidate.kernel);
        }
    }
    let fastest_slow = slow
        .iter()
        .filter_map(|index| answer.candidates[*index].time())
        .min()
        .expect("the slow ones were measured");
    crate::say(&format!(
        "winner {} at {winner:?}; slow ones from {fastest_slow:?}",
        answer.candidates[tuned.winner].kernel
    ));
    (winner, fastest_slow)
}
