//! Why a bucket store did not open.

/// Why a [`BucketStore`](crate::BucketStore) did not open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The remote tier's settings or keys: no key, a key or a
    /// `KILN_REMOTE_*` variable that cannot be read.
    #[error(transparent)]
    Remote(#[from] kiln_remote::Error),
    /// The bucket's address (`s3://BUCKET/PREFIX`) or its endpoint cannot
    /// be understood.
    #[error("the bucket address `{address}` cannot be used: {problem}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A variable is set to a value that cannot be read.
    #[error("{variable}={value:?} cannot be read: expected {expected}")]
    Setting {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it should hold.
        expected: &'static str,
    },
}

/// A result with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
