//! The fleet tier over TLS (P10, docs/FLEET.md): `rediss://` to a real
//! redis-server listening on its own `--tls-port`, with a certificate the
//! test makes with the `openssl` command line and the CA that signs it
//! given as `KILN_REMOTE_CA`.
//!
//! A node over TLS shares a batch with another; a server whose certificate
//! the CA does not sign fails the tier once, with one warning, and the
//! batch is put in and read from the disk. A node over TLS hears the
//! fleet's claims. Warnings are counted by a logger
//! of this binary's own; the tests run one at a time.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiln_engine::store::{Claim, ClaimWait, hex};
use kiln_engine::{
    ArtifactId, ArtifactStore, ArtifactStoreExt, Claims, KernelId, KeyComponents, Lookup, StoreKey,
};
use kiln_remote::{RemoteConfig, RemoteStore, TieredStore};
use kiln_store::{DiskStore, StoreConfig};
use kiln_test_support::Scratch;
use support::warned::{one_at_a_time, warnings};
use support::{RedisServer, config, find_on_path, fleet_keys, fresh_prefix};

fn key(number: u32) -> StoreKey {
    let components = KeyComponents::new("cuda", "nvrtc 13.0", "sm_90", "-O3");
    let id = ArtifactId::new(
        KernelId::named("tls.kernel").parameter(&number).build(),
        0u8,
    );
    StoreKey::for_artifact(&components, &id, None)
}

fn artifact(number: u32) -> Vec<u8> {
    (0..4000u32).map(|index| (index ^ number) as u8).collect()
}

/// Runs `openssl` with `arguments` in `folder`.
fn openssl(openssl: &Path, folder: &Path, arguments: &[&str]) -> Result<(), String> {
    let output = Command::new(openssl)
        .args(arguments)
        .current_dir(folder)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run openssl: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl {} failed: {}",
            arguments.first().unwrap_or(&""),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A CA `name`.pem (and its key) in `folder`.
fn make_ca(tool: &Path, folder: &Path, name: &str) -> Result<PathBuf, String> {
    openssl(
        tool,
        folder,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN=kiln test {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    Ok(folder.join(format!("{name}.pem")))
}

/// A server certificate for 127.0.0.1 and localhost that the CA `ca`
/// signs: (certificate, key).
fn make_server_certificate(
    tool: &Path,
    folder: &Path,
    ca: &str,
) -> Result<(PathBuf, PathBuf), String> {
    std::fs::write(
        folder.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .map_err(|error| error.to_string())?;
    openssl(
        tool,
        folder,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    )?;
    openssl(
        tool,
        folder,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    )?;
    Ok((folder.join("server.pem"), folder.join("server.key")))
}

/// A redis-server that also speaks TLS, on a port of its own, with a
/// certificate `ca` signs; and a second CA that signs nothing of it.
struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
    /// The CA that signs the server's certificate.
    ca: PathBuf,
    /// A CA that does not.
    other_ca: PathBuf,
    // Declared last: the server stops before its folder goes.
    scratch: Scratch,
}

impl TlsRedis {
    fn start() -> Result<Self, String> {
        let tool = find_on_path("openssl")
            .ok_or("the openssl command line is not installed; it makes the test's certificates")?;
        let scratch = Scratch::new("redis-tls");
        let folder = scratch.path().to_path_buf();
        let ca = make_ca(&tool, &folder, "ca")?;
        let other_ca = make_ca(&tool, &folder, "other-ca")?;
        let (certificate, key) = make_server_certificate(&tool, &folder, "ca")?;
        let mut last_error = String::new();
        // Another process may take the port between the probe and the
        // bind: try a few.
        for _ in 0..3 {
            let tls_port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .map_err(|error| error.to_string())?
                .port()
                .to_string();
            let path = |path: &Path| path.to_string_lossy().into_owned();
            match RedisServer::start(
                &folder,
                &[
                    "--tls-port",
                    &tls_port,
                    "--tls-cert-file",
                    &path(&certificate),
                    "--tls-key-file",
                    &path(&key),
                    "--tls-ca-cert-file",
                    &path(&ca),
                    "--tls-auth-clients",
                    "no",
                ],
            ) {
                Ok(server) => {
                    return Ok(Self {
                        server,
                        tls_port: tls_port.parse().map_err(|_| "a port is a number")?,
                        ca,
                        other_ca,
                        scratch,
                    });
                }
                Err(error) => last_error = error,
            }
        }
        Err(format!(
            "redis-server with --tls-port did not start (built without TLS?): {last_error}"
        ))
    }

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// A two-level store on a disk of its own, over TLS, trusting `ca`.
    fn node(&self, name: &str, prefix: &str, ca: &Path, keys: kiln_remote::Keys) -> TieredStore {
        let mut settings: RemoteConfig = config(&self.url(), keys, prefix);
        settings.ca_file = Some(ca.to_path_buf());
        settings.timeout = Duration::from_secs(1);
        settings.retry_after = Duration::from_millis(100);
        let remote = RemoteStore::open(settings).expect("a wrong certificate never fails opening");
        let disk =
            DiskStore::open(StoreConfig::at(self.scratch.join(name))).expect("a disk store opens");
        TieredStore::new(disk, remote)
    }
}

fn tls_redis_or_skip(what: &str) -> Option<TlsRedis> {
    TlsRedis::start()
        .map_err(|reason| support::skip(what, &reason))
        .ok()
}

// P10
#[test]
fn p10_a_node_over_tls_shares_a_batch_with_another() {
    let _turn = one_at_a_time();
    let Some(redis) = tls_redis_or_skip("a batch shared over TLS") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let builder = redis.node("builder", &prefix, &redis.ca, keys.clone());
    let batch: Vec<StoreKey> = (0..8).map(key).collect();
    for (number, key) in (0u32..).zip(&batch) {
        builder.put(key, None, &artifact(number), Duration::from_millis(40));
    }
    assert!(builder.flush(Duration::from_secs(20)), "the queue drains");
    assert_eq!(builder.tiered_statistics().remote_writes, 8);

    let node = redis.node("node", &prefix, &redis.ca, keys);
    for (number, lookup) in (0u32..).zip(node.lookup_many(&batch)) {
        match lookup {
            Lookup::Hit {
                artifact: bytes, ..
            } => assert!(bytes == artifact(number)),
            Lookup::Miss(miss) => panic!("a kernel the builder published over TLS: {miss}"),
        }
    }
    assert_eq!(node.tiered_statistics().remote_hits, 8);
    // The TLS port speaks nothing else: a plain client there is refused.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{}", redis.tls_port))
        .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(2)))
        .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
    assert!(plain.is_err(), "the TLS port answered a plain client");
    assert!(warnings().is_empty(), "a working remote: {:?}", warnings());
    // The entries are in the server the plain port also serves.
    let size = redis.server.command(&["DBSIZE"]).unwrap_or_default();
    assert!(!size.starts_with(":0"), "DBSIZE: {size}");
}

// P12
#[test]
fn p12_a_node_over_tls_hears_the_fleets_claims() {
    // The claims channel is heard on a connection of the listener's own,
    // over TLS too, checked against KILN_REMOTE_CA: a lease whose key is
    // deleted still holds for a node that heard it announced.
    let _turn = one_at_a_time();
    let Some(redis) = tls_redis_or_skip("claims heard over TLS") else {
        return;
    };
    let (keys, prefix) = (fleet_keys(), fresh_prefix());
    let store = || {
        let mut settings: RemoteConfig = config(&redis.url(), keys.clone(), &prefix);
        settings.ca_file = Some(redis.ca.clone());
        RemoteStore::open(settings).expect("the store opens")
    };
    let (holder, listener) = (store(), store());
    // Listening: it has claimed once.
    assert!(matches!(
        listener.claim(&key(100), ClaimWait::Once),
        Claim::Held(_)
    ));
    let taken = key(8);
    let Claim::Held(guard) = holder.claim(&taken, ClaimWait::Once) else {
        panic!("the first claim is held");
    };
    let claim = format!("{prefix}c:{}", hex(&taken.digest()));
    assert!(redis.server.command(&["DEL", &claim]).is_some());
    assert!(
        matches!(listener.claim(&taken, ClaimWait::Once), Claim::Busy),
        "the lease was heard over TLS"
    );
    drop(guard);
    assert!(matches!(
        listener.claim(&taken, ClaimWait::Patiently),
        Claim::Held(_)
    ));
    assert!(warnings().is_empty(), "{:?}", warnings());
}

/// Looks the batch up (all misses), puts it (the compile), and looks it up
/// again (all hits, from the disk).
fn compile_from_disk(store: &TieredStore, batch: &[StoreKey], first: u32) {
    for lookup in store.lookup_many(batch) {
        assert!(matches!(lookup, Lookup::Miss(_)), "nothing is in any tier");
    }
    for (number, key) in (first..).zip(batch) {
        store.put(key, None, &artifact(number), Duration::from_millis(40));
    }
    for (number, lookup) in (first..).zip(store.lookup_many(batch)) {
        match lookup {
            Lookup::Hit {
                artifact: bytes, ..
            } => assert!(bytes == artifact(number)),
            Lookup::Miss(miss) => panic!("the disk keeps what was put: {miss}"),
        }
    }
    assert!(store.flush(Duration::from_secs(10)), "queued writes end");
}

// P10
#[test]
fn p10_a_certificate_the_ca_does_not_sign_fails_the_tier_once_and_the_disk_goes_on() {
    let _turn = one_at_a_time();
    let Some(redis) = tls_redis_or_skip("a wrong certificate over TLS") else {
        return;
    };
    let started = Instant::now();
    let node = redis.node("wrong", &fresh_prefix(), &redis.other_ca, fleet_keys());
    let first: Vec<StoreKey> = (100..116).map(key).collect();
    compile_from_disk(&node, &first, 100);
    // Past the breaker's wait: its probes meet the same certificate, and
    // none of them warns again.
    std::thread::sleep(Duration::from_millis(250));
    let second: Vec<StoreKey> = (200..216).map(key).collect();
    compile_from_disk(&node, &second, 200);
    let heard = warnings();
    assert_eq!(
        heard.len(),
        1,
        "one wrong certificate, one warning: {heard:#?}"
    );
    assert!(
        heard[0].contains(&redis.url()) && heard[0].contains("certificate"),
        "the warning says which remote and that its certificate was refused: {}",
        heard[0]
    );
    let remote = node.remote().remote_statistics();
    assert!(remote.breaker_opened >= 1, "{remote:?}");
    assert_eq!(node.tiered_statistics().remote_hits, 0);
    // Nothing was written through the refused connection.
    let size = redis.server.command(&["DBSIZE"]).unwrap_or_default();
    assert!(size.starts_with(":0"), "DBSIZE: {size}");
    // Bounded: a few timeouts at most, however many calls asked.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

// P10
#[test]
fn p10_a_ca_file_that_cannot_be_read_stops_the_store_opening_with_its_name() {
    // A setting that cannot be used is the program's to log, as a bad
    // timeout is; it is never taken for the system's certificates.
    let scratch = Scratch::new("redis-tls-ca");
    let missing = scratch.join("no-such-ca.pem");
    let mut settings = config("rediss://127.0.0.1:1", fleet_keys(), &fresh_prefix());
    settings.ca_file = Some(missing.clone());
    let error = RemoteStore::open(settings)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(error.contains("KILN_REMOTE_CA"), "{error}");
    assert!(error.contains("no-such-ca.pem"), "{error}");
}
