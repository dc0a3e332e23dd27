//! Records: what a store remembers of its kernels, why a key missed (P9).

use std::time::Duration;

use super::*;

/// P9: the store says it never saw a kernel, that it holds it, which
/// component of the key changed since it held it, or that the entry is
/// gone.
pub fn p9_explain_names_the_changed_component_or_says_never_seen<S: StoreSubject>(subject: &S) {
    let store = subject.store();
    if !has_part("P9", "records", store.parts().records.is_some()) {
        return;
    }
    let key = kernel_key(0);
    assert_eq!(
        store.parts().explain(&key),
        Explanation::NeverSeen,
        "an empty store"
    );
    store.lookup(&key);
    assert_eq!(
        store.parts().explain(&key),
        Explanation::NeverSeen,
        "a miss is no entry"
    );
    expect_stored(
        store.put(&key, None, &artifact(0, 64), Duration::ZERO),
        "a put",
    );
    assert!(
        matches!(store.parts().explain(&key), Explanation::Held { .. }),
        "a key put is held"
    );
    let other_variant = StoreKey::for_artifact(&components(), &id(0, 1), None);
    store.lookup(&other_variant);
    match store.parts().explain(&other_variant) {
        Explanation::Changed { difference, .. } => {
            assert_eq!(difference.component, KeyComponent::Variant);
            assert_eq!(difference.stored, "0");
            assert_eq!(difference.asked, "1");
        }
        other => panic!("another variant of a stored kernel is a change, not {other:?}"),
    }
    let mut other_options = components();
    other_options.options = "-O0".into();
    match store
        .parts()
        .explain(&StoreKey::for_artifact(&other_options, &id(0, 0), None))
    {
        Explanation::Changed { difference, .. } => {
            assert_eq!(difference.component, KeyComponent::Options);
        }
        other => panic!("other options for a stored kernel are a change, not {other:?}"),
    }
    assert_eq!(
        store.parts().explain(&kernel_key(1)),
        Explanation::NeverSeen,
        "another kernel was never seen"
    );
    store.remove(&key);
    assert!(
        matches!(store.parts().explain(&key), Explanation::Gone { .. }),
        "a removed key is gone"
    );
}
