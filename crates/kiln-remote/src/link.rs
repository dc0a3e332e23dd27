//! The connection to Redis or Redis Cluster: blocking connections kept in
//! a small pool, every call bounded by the timeout, and the breaker in
//! front of every call (P10).
//!
//! Nothing connects when the store opens: a missing or misconfigured Redis
//! never holds up start-up. The first call connects, within the timeout.
//! A connection that failed a call (timed out with a reply still on the
//! way, reset, closed) is dropped, never put back.
//!
//! One deadline per call, whatever the call: connecting, writing and every
//! reply of a pipeline together. The `redis` crate bounds each read by the
//! socket's timeout, and its pipelined read goes on reading every reply
//! after the first one timed out, so a Redis that accepts and never
//! answers would cost a pipeline of N commands N timeouts. A call
//! therefore runs on a thread of its own while the caller waits at most
//! the timeout for its answer; past it the caller has its miss and the
//! breaker opens, and the thread, with its connection, ends on its own
//! (the connection is never put back).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection, ClusterPipeline};
use redis::{
    Cmd, Connection, ErrorKind, FromRedisValue, IntoConnectionInfo, Pipeline, RedisError,
    RedisResult, TlsCertificates,
};

use crate::breaker::{Breaker, Permit};
use crate::error::{Error, Result};
use crate::statistics::{Counters, bump};

/// Idle connections kept for the next call; more are closed.
const IDLE_CONNECTIONS: usize = 8;

enum Server {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// One open connection, and the count of commands sent on the remote's
/// connections.
pub(crate) struct Link {
    connection: Connected,
    sent: Arc<AtomicU64>,
}

enum Connected {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

impl Link {
    fn count(&self, commands: usize) {
        self.sent.fetch_add(commands as u64, Ordering::Relaxed);
    }

    /// Runs one command.
    pub(crate) fn query<T: FromRedisValue>(&mut self, command: &Cmd) -> RedisResult<T> {
        self.count(1);
        match &mut self.connection {
            Connected::Single(connection) => command.query(connection),
            Connected::Cluster(connection) => command.query(connection.as_mut()),
        }
    }

    /// Every key whose name matches `pattern`: `SCAN` on one Redis, a
    /// `KEYS` on every primary of a cluster (the `redis` crate sends it to
    /// each and joins the answers). Each reply is bounded by the timeout.
    pub(crate) fn keys_matching(&mut self, pattern: &str) -> RedisResult<Vec<Vec<u8>>> {
        let sent = Arc::clone(&self.sent);
        match &mut self.connection {
            Connected::Single(connection) => {
                let mut found = Vec::new();
                let mut cursor = 0u64;
                loop {
                    let mut command = redis::cmd("SCAN");
                    command
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(1000);
                    sent.fetch_add(1, Ordering::Relaxed);
                    let (next, names): (u64, Vec<Vec<u8>>) = command.query(connection)?;
                    found.extend(names);
                    if next == 0 {
                        return Ok(found);
                    }
                    cursor = next;
                }
            }
            Connected::Cluster(connection) => {
                sent.fetch_add(1, Ordering::Relaxed);
                let mut command = redis::cmd("KEYS");
                command.arg(pattern);
                command.query(connection.as_mut())
            }
        }
    }

    /// Runs `commands` in one round trip (one per shard of a cluster) and
    /// returns their replies in order.
    pub(crate) fn pipeline<T: FromRedisValue>(&mut self, commands: Vec<Cmd>) -> RedisResult<T> {
        self.count(commands.len());
        match &mut self.connection {
            Connected::Single(connection) => {
                let mut pipeline = Pipeline::with_capacity(commands.len());
                for command in commands {
                    pipeline.add_command(command);
                }
                pipeline.query(connection)
            }
            Connected::Cluster(connection) => {
                let mut pipeline = ClusterPipeline::with_capacity(commands.len());
                for command in commands {
                    pipeline.add_command(command);
                }
                pipeline.query(connection.as_mut())
            }
        }
    }
}

/// Redis behind a breaker, with a pool of connections.
pub(crate) struct Remote {
    server: Arc<Server>,
    /// Where the fleet's claims are heard: the server, or a cluster's
    /// first node.
    pub(crate) listen_at: redis::ConnectionInfo,
    /// The address without its password, for messages.
    shown: String,
    timeout: Duration,
    idle: Mutex<Vec<Link>>,
    pub(crate) breaker: Breaker,
    /// Whether an error reply was already logged.
    warned_reply: std::sync::atomic::AtomicBool,
    /// The reason of the last outage warned of: an outage that opens again
    /// for the same reason (a certificate that still does not verify, a
    /// server still refusing connections) is not said twice.
    warned_outage: Mutex<Option<String>>,
    /// Commands sent, every connection together.
    sent: Arc<AtomicU64>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.shown)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// A remote at `url`, not yet connected; `ca` is the PEM text of the
    /// CA certificates a `rediss://` server's certificate must chain to
    /// (`None`: the system's).
    pub(crate) fn new(
        url: &str,
        ca: Option<&[u8]>,
        timeout: Duration,
        retry_after: Duration,
    ) -> Result<Self> {
        let shown = without_password(url);
        let bad = |problem: String| Error::Url {
            url: shown.clone(),
            problem,
        };
        let tls = url.starts_with("rediss://") || url.starts_with("rediss+cluster://");
        if tls {
            // The `redis` crate asks rustls for the process's provider,
            // which panics unless exactly one is built in or installed:
            // install aws-lc-rs unless the program installed one already.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        }
        let certificates = match ca {
            Some(_) if !tls => {
                return Err(Error::Ca {
                    problem: "it is set for an address without TLS; use rediss://".into(),
                });
            }
            Some(pem) => Some(certificates(pem)?),
            None => None,
        };
        let cluster = url
            .strip_prefix("redis+cluster://")
            .map(|rest| ("redis", rest))
            .or_else(|| {
                url.strip_prefix("rediss+cluster://")
                    .map(|rest| ("rediss", rest))
            });
        let (server, listen_at) = if let Some((scheme, rest)) = cluster {
            let (credentials, hosts) = match rest.rsplit_once('@') {
                Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
                None => (String::new(), rest),
            };
            let hosts = hosts.split('/').next().unwrap_or_default();
            let nodes: Vec<redis::ConnectionInfo> = hosts
                .split(',')
                .map(str::trim)
                .filter(|host| !host.is_empty())
                .map(|host| quiet(&format!("{scheme}://{credentials}{host}"), &certificates))
                .collect::<RedisResult<_>>()
                .map_err(|error| bad(error.to_string()))?;
            if nodes.is_empty() {
                return Err(bad(format!("no HOST:PORT after {scheme}+cluster://")));
            }
            let listen_at = nodes[0].clone();
            let mut builder = ClusterClient::builder(nodes)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                // A redirect (a slot that moved) is followed once; more
                // retries would multiply the time a dead shard costs.
                .retries(1)
                .min_retry_wait(1)
                .max_retry_wait(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder.build().map_err(|error| bad(error.to_string()))?;
            (Server::Cluster(client), listen_at)
        } else if url.starts_with("redis://") || url.starts_with("rediss://") {
            let client = quiet(url, &certificates)
                .and_then(redis::Client::open)
                .map_err(|error| bad(error.to_string()))?;
            let listen_at = client.get_connection_info().clone();
            (Server::Single(client), listen_at)
        } else {
            return Err(bad("an unknown scheme".into()));
        };
        Ok(Self {
            server: Arc::new(server),
            listen_at,
            shown,
            timeout,
            idle: Mutex::new(Vec::new()),
            breaker: Breaker::new(retry_after),
            warned_reply: std::sync::atomic::AtomicBool::new(false),
            warned_outage: Mutex::new(None),
            sent: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Runs `call` on a connection, unless the breaker is open. A failed
    /// call is counted, opens the breaker when the connection failed, and
    /// gives `None`: the caller answers a miss or a failed write. The
    /// caller waits at most the timeout, whatever `call` sends.
    pub(crate) fn call<T, F>(&self, counters: &Counters, call: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Link) -> RedisResult<T> + Send + 'static,
    {
        let permit = self.breaker.permit();
        if permit == Permit::Open {
            bump(&counters.skipped_while_open);
            return None;
        }
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let opened_before = self.breaker.times_opened();
        let result = self.within_deadline(idle, call, opened_before);
        match result {
            Ok((value, link)) => {
                self.breaker.succeeded();
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                if idle.len() < IDLE_CONNECTIONS {
                    idle.push(link);
                }
                Some(value)
            }
            Err(Failed::Ended) => {
                // Another call's failure opened the breaker while this
                // one was in flight: it ends with it (one timeout for
                // the calls of a batch, not one each), counted apart.
                bump(&counters.ended_by_breaker);
                if permit == Permit::Probe {
                    self.breaker.failed(permit);
                }
                None
            }
            Err(Failed::Error(error)) => {
                self.failed(counters, permit, &error);
                None
            }
        }
    }

    /// Commands sent so far, every connection together.
    pub(crate) fn commands(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// `call` on `idle` (or a new connection) on a thread of its own, its
    /// answer waited for at most the timeout, and no longer once the
    /// breaker opened after `opened_before` openings (another call failed).
    fn within_deadline<T, F>(
        &self,
        idle: Option<Link>,
        call: F,
        opened_before: u64,
    ) -> std::result::Result<(T, Link), Failed>
    where
        T: Send + 'static,
        F: FnOnce(&mut Link) -> RedisResult<T> + Send + 'static,
    {
        let (answer, answered) = mpsc::sync_channel(1);
        let server = Arc::clone(&self.server);
        let timeout = self.timeout;
        let sent = Arc::clone(&self.sent);
        let run = move || {
            let connected = match idle {
                Some(link) => Ok(link),
                None => connect(&server, timeout, sent),
            };
            let result = connected.and_then(|mut link| call(&mut link).map(|value| (value, link)));
            // The caller may have given up: the answer, and the
            // connection with it, is dropped here.
            let _ = answer.send(result);
        };
        if let Err(error) = std::thread::Builder::new()
            .name("kiln-remote-call".into())
            .spawn(run)
        {
            return Err(Failed::Error(RedisError::from(std::io::Error::other(
                format!("no thread for a remote call: {error}"),
            ))));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(Failed::Error(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {timeout:?}"),
                ))));
            }
            match answered.recv_timeout((deadline - now).min(BREAKER_LOOK)) {
                Ok(result) => return result.map_err(Failed::Error),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if self.breaker.times_opened() != opened_before {
                        return Err(Failed::Ended);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(Failed::Error(RedisError::from(std::io::Error::other(
                        "the remote call ended without an answer",
                    ))));
                }
            }
        }
    }

    /// Opens a connection for the next call when none is idle, so that the
    /// first batch does not pay for connecting: for a thread of its own,
    /// off the launch path. A remote that cannot be reached is counted and
    /// opens the breaker, as a failed call does.
    pub(crate) fn prepare(&self, counters: &Counters) {
        let has_idle = !self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty();
        if !has_idle {
            self.call(counters, move |_| Ok(()));
        }
    }

    fn failed(&self, counters: &Counters, permit: Permit, error: &RedisError) {
        if error.is_timeout() {
            bump(&counters.timeouts);
        } else {
            bump(&counters.errors);
        }
        let answered = matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension);
        if answered && !error.is_cluster_error() {
            // The server answered with an error (out of memory, a command
            // refused): it is there, so the breaker stays as it is.
            if permit == Permit::Probe {
                self.breaker.succeeded();
            }
            if !self
                .warned_reply
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                log::warn!(
                    "kiln: the remote store at {} refused a call ({error}); kernels still load \
                     from the local store or compile, and refusals are counted",
                    self.shown
                );
            }
            return;
        }
        // Every idle connection may be as dead as this one.
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if self.breaker.failed(permit) {
            bump(&counters.breaker_opened);
            let reason = error.to_string();
            let mut warned = self
                .warned_outage
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if warned.as_deref() == Some(reason.as_str()) {
                log::debug!(
                    "kiln: the remote store at {} is not answering again ({reason})",
                    self.shown
                );
            } else {
                log::warn!(
                    "kiln: the remote store at {} is not answering ({reason}); using the local \
                     store alone and asking it again in a while",
                    self.shown
                );
                *warned = Some(reason);
            }
        }
    }
}

fn connect(server: &Server, timeout: Duration, sent: Arc<AtomicU64>) -> RedisResult<Link> {
    let connection = match server {
        Server::Single(client) => {
            let connection = client.get_connection_with_timeout(timeout)?;
            connection.set_read_timeout(Some(timeout))?;
            connection.set_write_timeout(Some(timeout))?;
            Connected::Single(connection)
        }
        Server::Cluster(client) => {
            let connection = client.get_connection()?;
            connection.set_read_timeout(Some(timeout))?;
            connection.set_write_timeout(Some(timeout))?;
            Connected::Cluster(Box::new(connection))
        }
    };
    Ok(Link { connection, sent })
}

/// How often a call waiting for its answer looks whether the breaker
/// opened meanwhile.
const BREAKER_LOOK: Duration = Duration::from_millis(10);

/// Why a call gave no answer.
enum Failed {
    /// The remote failed it, or it ran past the timeout.
    Error(RedisError),
    /// The breaker opened while it was in flight.
    Ended,
}

/// The connection `url` names, without the `CLIENT SETINFO` the `redis`
/// crate sends on every new connection by default: a round trip more per
/// connection, which a Redis before 7.2 answers with an error anyway.
///
/// A `rediss://` address with `certificates` trusts them in place of the
/// system's CA certificates.
fn quiet(url: &str, certificates: &Option<TlsCertificates>) -> RedisResult<redis::ConnectionInfo> {
    let info = url.into_connection_info()?;
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(settings);
    match certificates {
        Some(certificates) if url.starts_with("rediss://") => {
            redis::Client::build_with_tls(info, certificates.clone())
                .map(|client| client.get_connection_info().clone())
        }
        _ => Ok(info),
    }
}

/// The CA certificates of `pem`, checked now: a file that holds none, or
/// one that cannot be read, is refused when the store opens, never taken
/// for "trust nothing" (a tier failing at every call) or for the system's.
fn certificates(pem: &[u8]) -> Result<TlsCertificates> {
    let certificates = TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    };
    let holds_one = pem
        .windows(CERTIFICATE.len())
        .any(|window| window == CERTIFICATE);
    if !holds_one {
        return Err(Error::Ca {
            problem: "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        });
    }
    // The `redis` crate parses them when a client is built: build one.
    redis::Client::build_with_tls("rediss://127.0.0.1:1", certificates.clone()).map_err(
        |error| Error::Ca {
            problem: error.to_string(),
        },
    )?;
    Ok(certificates)
}

/// What starts a certificate in a PEM file.
const CERTIFICATE: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// `url` with any password replaced by `***`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((credentials, hosts)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            without_password("redis://user:hunter2@host:1"),
            "redis://user:***@host:1"
        );
        let error = Remote::new(
            "ftp://:hunter2@host",
            None,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn a_tls_address_opens_and_a_ca_file_is_checked_when_the_store_opens() {
        // P10: rediss:// is TLS; a CA bundle that holds no certificate, or
        // one given for a plain address, is refused when the store opens,
        // never taken for the system's certificates or for none.
        let second = Duration::from_secs(1);
        for url in [
            "rediss://:secret@host:6380",
            "rediss+cluster://host:1,host:2",
        ] {
            assert!(Remote::new(url, None, second, second).is_ok(), "{url}");
            let error = Remote::new(url, Some(b"not a certificate"), second, second)
                .unwrap_err()
                .to_string();
            assert!(error.contains("KILN_REMOTE_CA"), "{error}");
            assert!(!error.contains("secret"), "{error}");
        }
        let pem = b"-----BEGIN CERTIFICATE-----\nnot base64 !\n-----END CERTIFICATE-----\n";
        let error = Remote::new("rediss://host:6380", Some(pem), second, second)
            .unwrap_err()
            .to_string();
        assert!(error.contains("KILN_REMOTE_CA"), "{error}");
        let error = Remote::new("redis://host:6379", Some(pem), second, second)
            .unwrap_err()
            .to_string();
        assert!(error.contains("rediss://"), "{error}");
    }

    #[test]
    fn a_cluster_address_names_every_node() {
        assert!(
            Remote::new(
                "redis+cluster://127.0.0.1:1,127.0.0.1:2",
                None,
                Duration::from_secs(1),
                Duration::from_secs(1)
            )
            .is_ok()
        );
        assert!(
            Remote::new(
                "redis+cluster://",
                None,
                Duration::from_secs(1),
                Duration::from_secs(1)
            )
            .is_err()
        );
    }
}
