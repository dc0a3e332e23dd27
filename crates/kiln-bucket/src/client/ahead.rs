//! A connection opened ahead of the first request: when a tier is bound,
//! a thread of its own opens one TCP connection to the bucket, and the
//! first request that would open a new connection takes it. A process's
//! first batch (an empty disk's warm start: its batch pack's GET) then
//! does not pay the connection's handshake, a round trip on a network,
//! on its launch path.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
};
use ureq::{Error, Timeout};

/// How long a connection opened ahead is offered: a server closes a
/// connection that sent nothing after a few seconds, and a request on a
/// closed one would fail.
const FRESH_FOR: Duration = Duration::from_secs(2);

/// The connections opened ahead, and their counts.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// Connections opened and not taken yet, oldest first.
    open: Mutex<VecDeque<(TcpStream, Instant)>>,
    /// How many the opening thread keeps open while it runs.
    wanted: AtomicUsize,
    opening: AtomicBool,
    /// Connections opened ahead.
    pub(crate) opened: AtomicU64,
    /// Connections opened ahead that a request took.
    pub(crate) used: AtomicU64,
}

impl Ahead {
    fn open(&self) -> MutexGuard<'_, VecDeque<(TcpStream, Instant)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens connections to `host`:`port` on a thread of its own, each
    /// within `timeout`, until `count` are open and not taken (those
    /// opened before and still fresh among them); one thread opens them,
    /// one after another, and drops those gone stale.
    pub(crate) fn connect(
        self: &Arc<Self>,
        host: String,
        port: u16,
        timeout: Duration,
        count: usize,
    ) {
        self.wanted.fetch_max(count, Ordering::AcqRel);
        if self.opening.swap(true, Ordering::AcqRel) {
            return;
        }
        let ahead = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name("kiln-bucket-connect".to_owned())
            .spawn(move || {
                ahead.fill(&host, port, timeout);
                ahead.wanted.store(0, Ordering::Release);
                ahead.opening.store(false, Ordering::Release);
            });
        if started.is_err() {
            self.wanted.store(0, Ordering::Release);
            self.opening.store(false, Ordering::Release);
        }
    }

    /// Opens connections until as many as wanted are open and fresh, or
    /// one fails to open.
    fn fill(&self, host: &str, port: u16, timeout: Duration) {
        loop {
            {
                let mut open = self.open();
                open.retain(|(_, opened)| opened.elapsed() <= FRESH_FOR);
                if open.len() >= self.wanted.load(Ordering::Acquire) {
                    return;
                }
            }
            let stream = (host, port)
                .to_socket_addrs()
                .into_iter()
                .flatten()
                .find_map(|address| TcpStream::connect_timeout(&address, timeout).ok());
            let Some(stream) = stream else {
                return;
            };
            self.open().push_back((stream, Instant::now()));
            self.opened.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The oldest connection opened ahead that goes to one of
    /// `addresses`, is fresh and the server has not closed; those looked
    /// at before it are dropped.
    fn take(&self, addresses: &[SocketAddr]) -> Option<TcpStream> {
        loop {
            let (stream, opened) = self.open().pop_front()?;
            if opened.elapsed() <= FRESH_FOR
                && stream
                    .peer_addr()
                    .is_ok_and(|peer| addresses.contains(&peer))
                && still_open(&stream)
            {
                return Some(stream);
            }
        }
    }
}

/// A link of the client's connector chain, before the one that opens TCP
/// connections: it hands a request that would open a connection the one
/// opened ahead, when there is one.
#[derive(Debug)]
pub(crate) struct TakeAhead(pub(crate) Arc<Ahead>);

impl<In: Transport> Connector<In> for TakeAhead {
    type Out = Either<In, AheadTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, Error> {
        if let Some(chained) = chained {
            return Ok(Some(Either::A(chained)));
        }
        let Some(stream) = self.0.take(&details.addrs) else {
            return Ok(None);
        };
        let config = details.config;
        // As the chain's TCP link sets it (the agent is never shut down
        // from another thread, so no shutdown handle is registered).
        let _ = stream.set_nodelay(config.no_delay());
        self.0.used.fetch_add(1, Ordering::Relaxed);
        let buffers = LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size());
        Ok(Some(Either::B(AheadTransport { stream, buffers })))
    }
}

/// Whether the server has neither closed `stream` nor written to it: a
/// read would wait.
fn still_open(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let waiting = matches!(
        stream.peek(&mut [0u8; 1]),
        Err(error) if error.kind() == ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).is_ok() && waiting
}

/// A connection opened ahead, as the request's transport: blocking reads
/// and writes bounded by the request's time left.
#[derive(Debug)]
pub(crate) struct AheadTransport {
    stream: TcpStream,
    buffers: LazyBuffers,
}

/// What is left of `timeout` for one read or write (`None`: no limit),
/// or the timeout's error when nothing is.
fn left(timeout: NextTimeout) -> Result<Option<Duration>, Error> {
    if timeout.after.is_zero() {
        return Err(Error::Timeout(timeout.reason));
    }
    Ok(timeout.not_zero().map(|left| *left))
}

/// An I/O error, a timeout where the socket's timeout ended it.
fn sorted(error: std::io::Error, reason: Timeout) -> Error {
    match error.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::Timeout(reason),
        _ => Error::Io(error),
    }
}

impl Transport for AheadTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), Error> {
        let timeout = timeout.for_write();
        self.stream.set_write_timeout(left(timeout)?)?;
        let output = &self.buffers.output()[..amount];
        self.stream
            .write_all(output)
            .map_err(|error| sorted(error, timeout.reason))
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, Error> {
        let timeout = timeout.for_read();
        self.stream.set_read_timeout(left(timeout)?)?;
        let input = self.buffers.input_append_buf();
        let read = loop {
            match self.stream.read(input) {
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                read => break read,
            }
        };
        let amount = read.map_err(|error| sorted(error, timeout.reason))?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        still_open(&self.stream)
    }
}
