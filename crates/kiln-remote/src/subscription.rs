//! The fleet's channel heard on a connection of its own, every message
//! read with a bound (P12).
//!
//! Whoever can write Redis can publish on the channel, and one who may
//! also lift Redis's limit on a subscriber's output can publish a message
//! of hundreds of MiB. A client that reads each reply whole would hold all
//! of it, more than once. This reader reads a reply's lengths first: a
//! string longer than any claim's message is read past in small pieces and
//! never kept, so a listener holds at most [`MESSAGE_LIMIT`] and one read
//! at a time, whatever is sent.
//!
//! It speaks the protocol's second version, as a subscriber only: `AUTH`
//! when the address has a password, `SUBSCRIBE`, then messages. Plain TCP,
//! or TLS over rustls trusting the same certificates as the store's other
//! connections (`KILN_REMOTE_CA`'s, or the system's).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

/// The longest message a listener reads. A claim's message is a subject
/// and a lease (well under 1 KiB, its host name cut to a few dozen bytes);
/// a hello is shorter still.
pub(crate) const MESSAGE_LIMIT: usize = 16 * 1024;

/// The longest line of the protocol read: a length, an integer, a short
/// status or an error.
const LINE_LIMIT: usize = 4 * 1024;

/// How much is read from the socket at once.
const READ_CHUNK: usize = 16 * 1024;

/// The most elements of one reply on a subscribed connection (a message
/// has three, a pattern's four).
const ELEMENTS_LIMIT: i64 = 16;

/// What one read of the channel gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// A message published on the channel.
    Message(Vec<u8>),
    /// A message longer than [`MESSAGE_LIMIT`], read past and dropped: its
    /// length.
    TooLarge(u64),
    /// A reply that is no message (a subscription's confirmation).
    Other,
    /// Nothing within the read timeout (what was read so far is kept).
    Nothing,
}

/// One element of a reply.
#[derive(Debug, PartialEq, Eq)]
enum Part {
    Bytes(Vec<u8>),
    /// A string longer than the limit, read past: its length.
    Skipped(u64),
    Integer(i64),
    Error(String),
    Nil,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn socket(&self) -> &TcpStream {
        match self {
            Self::Plain(socket) => socket,
            Self::Tls(stream) => &stream.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Plain(socket) => socket.read(buffer),
            Self::Tls(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(socket) => socket.write(bytes),
            Self::Tls(stream) => stream.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Plain(socket) => socket.flush(),
            Self::Tls(stream) => stream.flush(),
        }
    }
}

/// A connection subscribed to one channel, read with a bound.
pub(crate) struct Subscription {
    stream: Stream,
    /// Bytes read and not yet taken, from `start`.
    buffer: Vec<u8>,
    start: usize,
    /// The reply being read: how many elements are still to come (`None`
    /// before its first line), and those read.
    left: Option<usize>,
    parts: Vec<Part>,
    /// A string's length whose bytes are still to come.
    bulk: Option<usize>,
    /// How many bytes of a string too long to keep are still to be read
    /// past (its line end included).
    skipping: u64,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl Subscription {
    /// Connects to `server` (`ca`: the PEM text of the CA certificates a
    /// TLS server's certificate must chain to, `None` for the system's),
    /// authenticates, and subscribes to `channel`, each step within
    /// `timeout`.
    pub(crate) fn open(
        server: &redis::ConnectionInfo,
        ca: Option<&[u8]>,
        channel: &str,
        timeout: Duration,
    ) -> io::Result<Self> {
        let stream = match server.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Stream::Plain(connect(host, *port, timeout)?),
            redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                if *insecure {
                    return Err(invalid("certificates not checked: refused"));
                }
                let socket = connect(host, *port, timeout)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|error| invalid(format!("{host}: {error}")))?;
                let connection = rustls::ClientConnection::new(tls_config(ca)?, name)
                    .map_err(io::Error::other)?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(connection, socket)))
            }
            _ => {
                return Err(invalid(
                    "an address kind the fleet's channel is not heard on",
                ));
            }
        };
        let mut subscription = Self {
            stream,
            buffer: Vec::new(),
            start: 0,
            left: None,
            parts: Vec::new(),
            bulk: None,
            skipping: 0,
        };
        subscription.set_read_timeout(timeout)?;
        subscription
            .stream
            .socket()
            .set_write_timeout(Some(timeout))?;
        if let Some(password) = server.redis_settings().password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = server.redis_settings().username() {
                auth.arg(user);
            }
            auth.arg(password);
            subscription.send(&auth)?;
            subscription.answer()?;
        }
        subscription.send(redis::cmd("SUBSCRIBE").arg(channel))?;
        subscription.answer()?;
        Ok(subscription)
    }

    /// How long a read waits for bytes before [`Heard::Nothing`].
    pub(crate) fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream
            .socket()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
    }

    fn send(&mut self, command: &redis::Cmd) -> io::Result<()> {
        self.stream.write_all(&command.get_packed_command())?;
        self.stream.flush()
    }

    /// Waits (at most a read timeout of silence) for the answer to a
    /// command: an error or silence is an error.
    fn answer(&mut self) -> io::Result<()> {
        match self.reply()? {
            Some(parts) => match parts.first() {
                Some(Part::Error(error)) => Err(io::Error::other(error.clone())),
                _ => Ok(()),
            },
            None => Err(io::ErrorKind::TimedOut.into()),
        }
    }

    /// The next thing heard, or [`Heard::Nothing`] after a read timeout of
    /// silence.
    pub(crate) fn next(&mut self) -> io::Result<Heard> {
        let Some(parts) = self.reply()? else {
            return Ok(Heard::Nothing);
        };
        match parts.as_slice() {
            [Part::Bytes(kind), _, Part::Bytes(payload)] if kind == b"message" => {
                Ok(Heard::Message(payload.clone()))
            }
            [Part::Bytes(kind), _, Part::Skipped(length)] if kind == b"message" => {
                Ok(Heard::TooLarge(*length))
            }
            [Part::Error(error), ..] => Err(io::Error::other(error.clone())),
            _ => Ok(Heard::Other),
        }
    }

    /// The next whole reply, or `None` after a read timeout of silence
    /// (what was read of a reply stays for the next call).
    fn reply(&mut self) -> io::Result<Option<Vec<Part>>> {
        loop {
            if let Some(parts) = self.step()? {
                return Ok(Some(parts));
            }
            match self.fill() {
                Ok(()) => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Reads more from the socket, one chunk at most.
    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.start = 0;
        }
        let mut chunk = [0u8; READ_CHUNK];
        let read = self.stream.read(&mut chunk)?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.buffer.extend_from_slice(&chunk[..read]);
        Ok(())
    }

    fn unread(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    /// Takes what is buffered of the reply being read: the reply once it
    /// is whole, `None` while bytes are missing.
    fn step(&mut self) -> io::Result<Option<Vec<Part>>> {
        loop {
            if self.skipping > 0 {
                let taken = self.skipping.min(self.unread().len() as u64);
                // `taken` is at most what is buffered.
                self.start += usize::try_from(taken).unwrap_or(usize::MAX);
                self.skipping -= taken;
                if self.skipping > 0 {
                    return Ok(None);
                }
                if let Some(parts) = self.element_read() {
                    return Ok(Some(parts));
                }
                continue;
            }
            if let Some(length) = self.bulk {
                let unread = self.unread();
                if unread.len() < length + 2 {
                    return Ok(None);
                }
                if &unread[length..length + 2] != b"\r\n" {
                    return Err(invalid("a string without its line end"));
                }
                let bytes = unread[..length].to_vec();
                self.start += length + 2;
                self.bulk = None;
                self.parts.push(Part::Bytes(bytes));
                if let Some(parts) = self.element_read() {
                    return Ok(Some(parts));
                }
                continue;
            }
            let Some(line) = self.line()? else {
                return Ok(None);
            };
            let (kind, rest) = line.split_first().ok_or_else(|| invalid("an empty line"))?;
            let number = || -> io::Result<i64> {
                std::str::from_utf8(rest)
                    .ok()
                    .and_then(|text| text.parse().ok())
                    .ok_or_else(|| invalid("a length that is not a number"))
            };
            match kind {
                b'*' => {
                    if self.left.is_some() {
                        return Err(invalid("a reply nested in another"));
                    }
                    let count = number()?;
                    if count > ELEMENTS_LIMIT {
                        return Err(invalid("a reply of too many elements"));
                    }
                    match usize::try_from(count) {
                        Ok(count) if count > 0 => self.left = Some(count),
                        _ => return Ok(Some(Vec::new())),
                    }
                    continue;
                }
                b'$' => {
                    let length = number()?;
                    match usize::try_from(length) {
                        Err(_) => self.parts.push(Part::Nil),
                        Ok(length) if length <= MESSAGE_LIMIT => {
                            self.bulk = Some(length);
                            continue;
                        }
                        Ok(_) => {
                            let length = length.unsigned_abs();
                            self.parts.push(Part::Skipped(length));
                            self.skipping = length + 2;
                            continue;
                        }
                    }
                }
                b':' => self.parts.push(Part::Integer(number()?)),
                b'+' => self.parts.push(Part::Bytes(rest.to_vec())),
                b'-' => self
                    .parts
                    .push(Part::Error(String::from_utf8_lossy(rest).into_owned())),
                _ => return Err(invalid("a reply of an unknown kind")),
            }
            if let Some(parts) = self.element_read() {
                return Ok(Some(parts));
            }
        }
    }

    /// One element of the reply was read: the reply, if that was its last.
    fn element_read(&mut self) -> Option<Vec<Part>> {
        match self.left {
            Some(left) if left > 1 => {
                self.left = Some(left - 1);
                None
            }
            _ => {
                self.left = None;
                Some(std::mem::take(&mut self.parts))
            }
        }
    }

    /// The next line, without its end, once it is buffered.
    fn line(&mut self) -> io::Result<Option<Vec<u8>>> {
        let unread = self.unread();
        match unread.windows(2).position(|pair| pair == b"\r\n") {
            Some(end) if end <= LINE_LIMIT => {
                let line = unread[..end].to_vec();
                self.start += end + 2;
                Ok(Some(line))
            }
            Some(_) => Err(invalid("a line too long")),
            None if unread.len() > LINE_LIMIT => Err(invalid("a line too long")),
            None => Ok(None),
        }
    }
}

/// A TCP connection to `host`:`port`, each address tried within `timeout`.
fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = None;
    for address in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(socket) => {
                socket.set_nodelay(true)?;
                return Ok(socket);
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| invalid(format!("{host} has no address"))))
}

/// What a TLS connection trusts: the CA certificates of `ca`, or the
/// system's; the process's rustls provider, else aws-lc-rs.
fn tls_config(ca: Option<&[u8]>) -> io::Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for certificate in CertificateDer::pem_slice_iter(pem) {
                let certificate = certificate.map_err(|error| invalid(error.to_string()))?;
                roots.add(certificate).map_err(io::Error::other)?;
            }
        }
        None => {
            for certificate in rustls_native_certs::load_native_certs().certs {
                // One the system holds that rustls cannot use is not
                // trusted; the others are.
                let _ = roots.add(certificate);
            }
        }
    }
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A subscription reading what a local socket is sent.
    fn fed(bytes: Vec<u8>) -> Subscription {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            socket.write_all(&bytes).unwrap();
            // Held open a while: the reader times out, never sees an end.
            std::thread::sleep(Duration::from_millis(300));
        });
        let socket = TcpStream::connect(address).unwrap();
        let subscription = Subscription {
            stream: Stream::Plain(socket),
            buffer: Vec::new(),
            start: 0,
            left: None,
            parts: Vec::new(),
            bulk: None,
            skipping: 0,
        };
        subscription
            .set_read_timeout(Duration::from_millis(100))
            .unwrap();
        drop(writer);
        subscription
    }

    fn message(payload: &[u8]) -> Vec<u8> {
        let mut bytes = b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n".to_vec();
        bytes.extend_from_slice(format!("${}\r\n", payload.len()).as_bytes());
        bytes.extend_from_slice(payload);
        bytes.extend_from_slice(b"\r\n");
        bytes
    }

    #[test]
    fn p12_a_message_over_the_limit_is_read_past_and_the_next_one_heard() {
        let mut bytes = b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n".to_vec();
        bytes.extend(message(b"one"));
        bytes.extend(message(&vec![b'x'; MESSAGE_LIMIT + 1]));
        bytes.extend(message(&vec![b'y'; MESSAGE_LIMIT]));
        bytes.extend(message(b"two"));
        let mut subscription = fed(bytes);
        assert_eq!(subscription.next().unwrap(), Heard::Other);
        assert_eq!(
            subscription.next().unwrap(),
            Heard::Message(b"one".to_vec())
        );
        assert_eq!(
            subscription.next().unwrap(),
            Heard::TooLarge(MESSAGE_LIMIT as u64 + 1)
        );
        // Never more kept than the limit and a read.
        assert!(subscription.buffer.capacity() <= 2 * (MESSAGE_LIMIT + READ_CHUNK));
        assert_eq!(
            subscription.next().unwrap(),
            Heard::Message(vec![b'y'; MESSAGE_LIMIT])
        );
        assert_eq!(
            subscription.next().unwrap(),
            Heard::Message(b"two".to_vec())
        );
        assert_eq!(subscription.next().unwrap(), Heard::Nothing);
    }

    #[test]
    fn p12_garbage_on_the_channel_ends_the_connection_not_the_node() {
        for garbage in [
            &b"*3\r\n*1\r\n"[..],
            b"?\r\n",
            b"$abc\r\n",
            b"*999\r\n",
            &[b'+'; LINE_LIMIT + 8][..],
        ] {
            let mut subscription = fed(garbage.to_vec());
            assert!(
                subscription.next().is_err(),
                "{:?}",
                String::from_utf8_lossy(&garbage[..garbage.len().min(16)])
            );
        }
    }
}
