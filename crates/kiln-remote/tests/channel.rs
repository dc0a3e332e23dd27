//! The fleet's claims channel read with a bound (P12), on a real
//! redis-server: a writer that lifts Redis's limit on what a subscriber is
//! sent (`client-output-buffer-limit pubsub 0 0 0`) publishes 64 MiB
//! messages on the channel; the node reads past them, says so once, keeps
//! hearing the claims after them, and its peak memory grows by far less
//! than one of them. The test binary holds this one test: the peak it
//! measures is the process's.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use kiln_engine::store::{Claim, ClaimWait, hex};
use kiln_engine::{ArtifactId, Claims, KernelId, KeyComponents, StoreKey};
use support::warned::{one_at_a_time, warnings};
use support::{Redis, fleet_keys, fresh_prefix, open};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("channel.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

/// The process's memory: its resident size now, or its peak (`VmHWM`), in
/// KiB.
fn memory(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Publishes `length` bytes on `channel` as a writer without the key
/// would, sent in pieces: this process never holds the message.
fn publish_large(port: u16, channel: &str, length: usize) -> String {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).expect("a connection to Redis");
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("a timeout");
    write!(
        socket,
        "*3\r\n$7\r\nPUBLISH\r\n${}\r\n{channel}\r\n${length}\r\n",
        channel.len()
    )
    .expect("the command is sent");
    let piece = vec![b'x'; 1 << 16];
    let mut left = length;
    while left > 0 {
        let now = left.min(piece.len());
        socket
            .write_all(&piece[..now])
            .expect("the message is sent");
        left -= now;
    }
    socket.write_all(b"\r\n").expect("the command ends");
    let mut reply = String::new();
    BufReader::new(socket)
        .read_line(&mut reply)
        .expect("PUBLISH answers");
    reply
}

#[test]
fn p12_a_64_mib_message_on_the_claims_channel_is_read_past_not_held() {
    let _turn = one_at_a_time();
    let redis = match Redis::single() {
        Ok(redis) => redis,
        Err(reason) => {
            support::skip("a bounded claims channel", &reason);
            return;
        }
    };
    let server = &redis.servers[0];
    assert!(
        server
            .command(&[
                "CONFIG",
                "SET",
                "client-output-buffer-limit",
                "pubsub 0 0 0"
            ])
            .is_some_and(|reply| reply.starts_with("+OK")),
        "the subscriber's output limit is lifted"
    );
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let listener = open(&redis.url(), keys.clone(), &prefix);
    let holder = open(&redis.url(), keys, &prefix);
    // Both listening: each has claimed once.
    let _first = listener.claim(&key(100), ClaimWait::Once);
    let _second = holder.claim(&key(101), ClaimWait::Once);

    // The peak from now on (5: reset the peak resident size to the
    // current one).
    let reset = std::fs::write("/proc/self/clear_refs", "5");
    let before = memory("VmHWM:").max(memory("VmRSS:"));
    if let Err(error) = reset {
        println!("the peak could not be reset ({error}): measured from the process's peak so far");
    }
    let channel = format!("{prefix}claims");
    for _ in 0..2 {
        let reply = publish_large(server.port, &channel, 64 << 20);
        assert!(
            reply.starts_with(':') && !reply.starts_with(":0"),
            "the message reached a subscriber: {reply:?}"
        );
    }

    // The claims after the messages are heard: a lease whose key is
    // deleted still holds for the listener, only by what it heard.
    let taken = key(8);
    let Claim::Held(guard) = holder.claim(&taken, ClaimWait::Once) else {
        panic!("the first claim is held");
    };
    let claim = format!("{prefix}c:{}", hex(&taken.digest()));
    assert!(server.command(&["DEL", &claim]).is_some());
    assert!(
        matches!(listener.claim(&taken, ClaimWait::Once), Claim::Busy),
        "the lease announced after the large messages was heard"
    );
    drop(guard);
    assert!(
        matches!(listener.claim(&taken, ClaimWait::Patiently), Claim::Held(_)),
        "the release was heard too"
    );

    let grown = memory("VmHWM:").saturating_sub(before);
    println!("peak resident size grew by {grown} KiB over two 64 MiB messages");
    assert!(
        grown < 16 << 10,
        "the peak grew by {grown} KiB: a 64 MiB message was held (65536 KiB)"
    );
    let said: Vec<String> = warnings()
        .into_iter()
        .filter(|warning| warning.contains("claims channel"))
        .collect();
    assert_eq!(said.len(), 1, "one warning for the process: {said:?}");
    assert!(said[0].contains("67108864 bytes"), "{said:?}");
}
