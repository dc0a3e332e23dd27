//! Groups: the end of a batch and what it keeps (P6).

use std::time::Duration;

use super::*;

/// P6: the end of a batch that left the store within its limits keeps
/// every entry.
pub fn p6_a_batch_end_within_the_limits_keeps_every_entry<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    if !has_part(
        "P6",
        "group commits or a batch's end",
        store.parts().groups.is_some(),
    ) {
        return;
    }
    for number in 0..4 {
        store.put(
            &kernel_key(number),
            None,
            &artifact(number as u8, 256),
            Duration::ZERO,
        );
    }
    store.parts().batch_finished();
    for number in 0..4 {
        let (found, _, _) = expect_hit(store.lookup(&kernel_key(number)), "an entry kept");
        assert!(found == artifact(number as u8, 256));
    }
    assert_eq!(store.statistics().evicted, 0, "nothing was evicted");
}
