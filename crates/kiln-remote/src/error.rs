//! The one error type of the crate: what can keep a remote store from
//! opening, or a copy (`kiln push`, `kiln pull`) from starting. Once open,
//! nothing fails: a remote that cannot answer is a miss or a counted failed
//! write (P5, P10).

/// Why a remote store or its keys could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No key to sign or verify entries with: an unsigned shared cache of
    /// native code is not offered (P10).
    #[error(
        "the remote tier needs a key to sign and verify its entries, and none is configured: \
         make one with `kiln keygen` (kiln_remote::keygen) and set KILN_REMOTE_KEY to a fleet \
         secret, or KILN_REMOTE_SIGNING_KEY (builders) and KILN_REMOTE_TRUSTED_KEYS (every node); \
         each takes the key itself or the path of a file holding it"
    )]
    NoKey,
    /// A key could not be read: the wrong kind, damaged text, or a file
    /// that cannot be opened. The message names the variable, never the key.
    #[error("{source_name}: {problem}")]
    BadKey {
        /// Where the key came from: a variable's name or a file's path.
        source_name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A setting that is set and cannot be read.
    #[error("{variable}={value:?} is not valid: expected {expected}")]
    Setting {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it should hold.
        expected: &'static str,
    },
    /// The remote's address cannot be understood.
    #[error(
        "the remote address {url:?} is not valid ({problem}): use redis://HOST:PORT or \
         redis+cluster://HOST:PORT,HOST:PORT,... (rediss:// for TLS)"
    )]
    Url {
        /// The address, without its password.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// This node holds no key that signs, or is read-only, and was asked
    /// to write the remote (`kiln push`).
    #[error(
        "this node cannot write the remote tier: it holds no key that signs{read_only}; a \
         builder sets KILN_REMOTE_SIGNING_KEY (an Ed25519 key from `kiln keygen --signing`, \
         whose public key the nodes list in KILN_REMOTE_TRUSTED_KEYS) or KILN_REMOTE_KEY (the \
         fleet key from `kiln keygen`)"
    )]
    CannotWrite {
        /// What else keeps it from writing, if anything: read-only.
        read_only: &'static str,
    },
    /// `KILN_REMOTE_CA` (the CA certificates of a `rediss://` server)
    /// cannot be used.
    #[error(
        "KILN_REMOTE_CA cannot be used ({problem}): set it to a PEM file of the CA certificates \
         that sign the Redis server's certificate, for a rediss:// address"
    )]
    Ca {
        /// What is wrong with it.
        problem: String,
    },
    /// The remote did not answer within the timeout (or its breaker is
    /// open after failures).
    #[error(
        "the remote tier at {url} does not answer (KILN_REMOTE_TIMEOUT bounds each call): check \
         that Redis runs there and can be reached from this machine"
    )]
    Unreachable {
        /// The address, without its password.
        url: String,
    },
    /// The disk store of a copy cannot be read or written.
    #[error("{0}")]
    Local(String),
    /// The operating system gave no random bytes for a new key.
    #[error("the operating system gave no random bytes for a new key: {0}")]
    Random(String),
}

/// What this crate's fallible functions return.
pub type Result<T, E = Error> = std::result::Result<T, E>;
