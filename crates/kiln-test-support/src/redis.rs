//! A real `redis-server` for the tests of the remote tier and of the
//! command line: on a free loopback port, its files in a scratch folder,
//! killed by its pid when dropped. A test that finds none prints why it
//! skips ([`skip`]), unless `KILN_REQUIRE_REDIS=1` (set by `cargo xtask
//! test`, which installs it) turns the skip into a failure.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `redis-server` to run: `KILN_REDIS_SERVER`, else the one on `PATH`.
pub fn redis_server() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("KILN_REDIS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    find_on_path("redis-server").ok_or_else(|| {
        "redis-server is not installed: `cargo xtask setup` installs it (Debian: apt-get \
         install redis-server), or set KILN_REDIS_SERVER to its path"
            .to_owned()
    })
}

/// The program `name` in a folder of `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|folder| folder.join(name))
        .find(|candidate| candidate.is_file())
}

/// Prints that `what` skips because `reason`, or fails when
/// `KILN_REQUIRE_REDIS=1`.
pub fn skip(what: &str, reason: &str) {
    if crate::require::is_required(&["KILN_REQUIRE_REDIS"]) {
        panic!("{what} cannot run and KILN_REQUIRE_REDIS=1: {reason}");
    }
    crate::skip(what, reason);
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("the loopback interface takes a listener")
}

/// One redis-server process, killed by its pid when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
}

impl RedisServer {
    /// A server on a free loopback port, keeping its files in `folder`,
    /// with `extra` arguments; `Err` says why it could not start.
    pub fn start(folder: &Path, extra: &[&str]) -> Result<Self, String> {
        let binary = redis_server()?;
        let mut last_error = String::new();
        // Another process may take the port between the probe and the
        // bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let log = std::fs::File::create(folder.join(format!("redis-{port}.log")))
                .map_err(|error| error.to_string())?;
            let child = Command::new(&binary)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--enable-debug-command", "local"])
                .arg("--dir")
                .arg(folder)
                .args(extra)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|error| error.to_string())?)
                .stderr(log)
                .spawn()
                .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
            let mut server = Self { child, port };
            if server.wait_until_it_answers(Duration::from_secs(10)) {
                return Ok(server);
            }
            last_error = format!("redis-server on port {port} did not answer PING");
            server.stop();
        }
        Err(last_error)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_until_it_answers(&mut self, within: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if self
                .command(&["PING"])
                .is_some_and(|reply| reply.starts_with("+PONG"))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Sends one command in RESP and returns the raw reply, or `None`.
    pub fn command(&self, words: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = vec![0u8; 64 << 10];
        let read = stream.read(&mut reply).ok()?;
        Some(String::from_utf8_lossy(&reply[..read]).into_owned())
    }

    /// Stops the server with SIGSTOP: it keeps its connections and its
    /// port, accepts new connections (the kernel does) and answers nothing
    /// until [`resume`](Self::resume)d: a frozen Redis.
    pub fn pause(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits");
        // SAFETY: a signal to the server this value started, by its pid
        // (reaped only when dropped, so the pid is still its).
        let sent = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(sent, 0, "SIGSTOP reaches redis-server");
    }

    /// Lets a [`pause`](Self::pause)d server go on (SIGCONT).
    pub fn resume(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits");
        // SAFETY: a signal to the server this value started, by its pid
        // (reaped only when dropped, so the pid is still its).
        let sent = unsafe { libc::kill(pid, libc::SIGCONT) };
        assert_eq!(sent, 0, "SIGCONT reaches redis-server");
    }

    /// Kills the server (SIGKILL, by its pid) and reaps it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A TCP proxy on loopback in front of a server: it adds a round-trip
/// time (half of it each way) and counts round trips, each time a client
/// speaks after the server did (a pipeline sent whole is one), so that
/// tests and benchmarks see what a remote far away would cost.
#[derive(Debug)]
pub struct LatencyProxy {
    /// The loopback port clients connect to.
    pub port: u16,
    round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LatencyProxy {
    /// A proxy to `127.0.0.1:target` adding `round_trip` to each round
    /// trip.
    pub fn start(target: u16, round_trip: Duration) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
        let port = listener.local_addr().expect("a local address").port();
        listener
            .set_nonblocking(true)
            .expect("a listener that does not block");
        let round_trips = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counted, stopped) = (Arc::clone(&round_trips), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", target)) {
                            forward_both(client, server, round_trip, &counted);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        });
        Self {
            port,
            round_trips,
            stop,
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The round trips counted so far, over every connection.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn forward_both(
    client: TcpStream,
    server: TcpStream,
    round_trip: Duration,
    round_trips: &std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // The server spoke last: the client's first bytes are a round trip.
    let server_spoke = Arc::new(AtomicBool::new(true));
    let half = round_trip / 2;
    let pipe = |mut from: TcpStream, mut to: TcpStream, from_client: bool| {
        let server_spoke = Arc::clone(&server_spoke);
        let round_trips = Arc::clone(round_trips);
        std::thread::spawn(move || {
            let mut buffer = vec![0u8; 256 << 10];
            loop {
                let read = match from.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(read) => read,
                };
                if from_client {
                    if server_spoke.swap(false, Ordering::AcqRel) {
                        round_trips.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    server_spoke.store(true, Ordering::Release);
                }
                if !half.is_zero() {
                    std::thread::sleep(half);
                }
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
    };
    let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    pipe(client_reader, server, true);
    pipe(server_reader, client, false);
}
