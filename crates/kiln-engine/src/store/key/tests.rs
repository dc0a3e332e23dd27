use super::*;
use crate::id::KernelId;

fn components() -> KeyComponents {
    KeyComponents::new("cuda", "nvrtc 12.4", "sm_90", "-O3")
}

fn id(number: u32) -> ArtifactId<u8> {
    ArtifactId::new(KernelId::named("saxpy").parameter(&number).build(), 1)
}

#[test]
fn the_same_inputs_give_the_same_key_digest() {
    // P1
    let a = StoreKey::for_artifact(&components(), &id(1), None);
    let b = StoreKey::for_artifact(&components(), &id(1), None);
    assert_eq!(a.digest(), b.digest());
}

#[test]
fn every_changed_component_gives_another_key_and_is_named() {
    // P1, P9
    let base = StoreKey::for_artifact(&components(), &id(1), None);
    let mut changes: Vec<(KeyComponent, StoreKey)> = Vec::new();
    let mut key = base.clone();
    key.format += 1;
    changes.push((KeyComponent::Format, key));
    for (component, edit) in [
        (
            KeyComponent::Backend,
            (|c: &mut KeyComponents| c.backend = "hip".into()) as fn(&mut KeyComponents),
        ),
        (KeyComponent::Compiler, |c| c.compiler = "nvrtc 12.5".into()),
        (KeyComponent::Architecture, |c| {
            c.architecture = "sm_80".into()
        }),
        (KeyComponent::Options, |c| c.options = "-O2".into()),
    ] {
        let mut changed = components();
        edit(&mut changed);
        changes.push((component, StoreKey::for_artifact(&changed, &id(1), None)));
    }
    changes.push((
        KeyComponent::Variant,
        StoreKey::for_artifact(&components(), &ArtifactId::new(id(1).kernel, 2u8), None),
    ));
    changes.push((
        KeyComponent::EntryPoint,
        StoreKey::for_artifact(&components(), &id(1), Some("main".into())),
    ));
    changes.push((
        KeyComponent::Kernel,
        StoreKey::for_artifact(&components(), &id(2), None),
    ));
    for (component, key) in changes {
        assert_ne!(key.digest(), base.digest(), "{component} is in the key");
        let difference = base.first_difference(&key).expect("the keys differ");
        assert_eq!(difference.component, component);
    }
    assert_eq!(base.first_difference(&base), None);
}

#[test]
fn a_key_gives_back_its_variant_and_nothing_of_another_type() {
    // P9: a listing names the variant an entry was stored under.
    let key = StoreKey::for_artifact(&components(), &id(1), None);
    assert_eq!(key.decode_variant::<u8>(), Some(1));
    assert_eq!(key.decode_variant::<(u8, u64)>(), None, "bytes too few");
    let wide = StoreKey::for_artifact(
        &components(),
        &ArtifactId::new(id(1).kernel, (7u8, 300u64)),
        None,
    );
    assert_eq!(wide.decode_variant::<u8>(), None, "bytes left over");
}

#[test]
fn source_keys_differ_by_text_and_not_by_kernel() {
    // P1, P7
    let a = StoreKey::for_source(&components(), &id(1), None, "text");
    let b = StoreKey::for_source(&components(), &id(2), None, "text");
    let c = StoreKey::for_source(&components(), &id(1), None, "other text");
    assert_eq!(a.digest(), b.digest());
    assert_ne!(a.digest(), c.digest());
    assert_eq!(
        a.first_difference(&c).map(|d| d.component),
        Some(KeyComponent::Source)
    );
    assert_ne!(
        a.digest(),
        StoreKey::for_artifact(&components(), &id(1), None).digest()
    );
}

fn provenance() -> Provenance {
    let cover = SourceCover::new("cuda", "k")
        .options(["-arch=sm_90", "-std=c++17"])
        .header("common.cuh", "#define ONE 1");
    Provenance::new(components(), &cover, "extern \"C\" __global__ void k() {}")
}

#[test]
fn every_changed_part_of_a_provenance_gives_another_digest_and_is_named() {
    // P1
    let base = provenance();
    assert_eq!(base.digest(), provenance().digest(), "the same inputs");
    let mut changed = Vec::new();
    let mut next = provenance();
    next.components.compiler = "nvrtc 13.1".into();
    changed.push((next, "compiler"));
    let mut next = provenance();
    next.components.architecture = "sm_80".into();
    changed.push((next, "compiler"));
    let mut next = provenance();
    next.options.push("--use_fast_math".into());
    changed.push((next, "options"));
    let mut next = provenance();
    next.source_digest = [0; 32];
    changed.push((next, "source"));
    let mut next = provenance();
    next.headers[0] = HeaderDigest::new("common.cuh", "#define ONE 2");
    changed.push((next, "headers"));
    let mut next = provenance();
    next.entry_point = "other".into();
    changed.push((next, "entry point"));
    for (other, part) in changed {
        assert_ne!(other.digest(), base.digest(), "{part}");
        assert_eq!(base.first_difference(&other), Some(part));
    }
    assert_eq!(base.first_difference(&base), None);
}

#[test]
fn a_preamble_changes_with_every_part_of_its_cover() {
    // P1, P7
    let base = || {
        SourceCover::new("hip", "k<1>")
            .options(["--gpu-architecture=gfx90a", "-DA=1"])
            .header("a.h", "int a;")
            .setting("layout", "automatic")
    };
    let preamble = base().preamble();
    for part in ["hip", "\"k<1>\"", "\"-DA=1\"", "\"a.h\"", "\"automatic\""] {
        assert!(preamble.contains(part), "{part} in {preamble}");
    }
    let others = [
        SourceCover::new("cuda", "k<1>")
            .options(["--gpu-architecture=gfx90a", "-DA=1"])
            .header("a.h", "int a;")
            .setting("layout", "automatic"),
        SourceCover::new("hip", "k<2>")
            .options(["--gpu-architecture=gfx90a", "-DA=1"])
            .header("a.h", "int a;")
            .setting("layout", "automatic"),
        base().options(["-O3"]),
        base().header("b.h", ""),
        SourceCover::new("hip", "k<1>")
            .options(["--gpu-architecture=gfx90a", "-DA=1"])
            .header("a.h", "int b;")
            .setting("layout", "automatic"),
        base().setting("zeroed", true),
    ];
    for other in others {
        assert_ne!(other.preamble(), preamble, "{other:?}");
    }
    // One option with a space is not two options.
    assert_ne!(
        SourceCover::new("cuda", "k").options(["-a -b"]).preamble(),
        SourceCover::new("cuda", "k")
            .options(["-a", "-b"])
            .preamble()
    );
}

#[test]
fn no_line_of_a_preamble_spans_lines_or_continues_onto_the_next() {
    let preamble = SourceCover::new("cuda", "k\nint x;")
        .options(["-DA=\\"])
        .header("a\nb.h", "")
        .setting("note", "one\ntwo")
        .preamble();
    assert_eq!(preamble.lines().count(), 5, "{preamble}");
    for line in preamble.lines() {
        assert!(line.starts_with("// "), "{line}");
        assert!(!line.ends_with('\\'), "{line}");
    }
}
