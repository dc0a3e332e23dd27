//! Kernel, artifact and device identities.
//!
//! A [`KernelId`] names what a kernel *is* — its type and the parameters it
//! was specialized with — without generating any code. It is the key of every
//! map kiln keeps, in memory and on disk, so it has to be the same in every
//! process that runs the same program: it is never built from a `TypeId`, a
//! pointer or a seeded hasher. A [`DeviceId`] names the device a loaded
//! kernel lives on.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

/// The stable identity of a kernel: its type name and a 128-bit digest of the
/// type name and the parameters it was specialized with.
///
/// Building one costs hashing the parameters, nothing else; comparing two
/// compares the digests first. Hashing a `KernelId` into a map hashes only
/// the digest, which already covers the name.
///
/// ```
/// use kiln_engine::KernelId;
///
/// struct Saxpy;
/// let a = KernelId::builder::<Saxpy>().parameter(&256u32).parameter("f32").build();
/// let b = KernelId::builder::<Saxpy>().parameter(&256u32).parameter("f32").build();
/// let c = KernelId::builder::<Saxpy>().parameter(&512u32).parameter("f32").build();
/// assert_eq!(a, b);
/// assert_ne!(a, c);
/// ```
#[derive(Clone, Serialize, Deserialize)]
pub struct KernelId {
    name: Cow<'static, str>,
    digest: u128,
}

impl KernelId {
    /// Starts an id for kernels of type `K`, named by `std::any::type_name`.
    pub fn builder<K: ?Sized>() -> KernelIdBuilder {
        KernelIdBuilder::named(std::any::type_name::<K>())
    }

    /// Starts an id for a kernel family named `name`: for kernels that are
    /// not one Rust type each (a directory of `.wgsl` files, say).
    pub fn named(name: impl Into<Cow<'static, str>>) -> KernelIdBuilder {
        KernelIdBuilder::named(name)
    }

    /// The id of a kernel of type `K` specialized with `parameters`.
    pub fn of<K: ?Sized>(parameters: &impl Hash) -> Self {
        Self::builder::<K>().parameter(parameters).build()
    }

    /// The kernel's type or family name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The 128-bit digest of the name and the parameters.
    pub fn digest(&self) -> u128 {
        self.digest
    }

    /// The digest as 32 lower-case hex digits, for file names and store keys.
    pub fn digest_hex(&self) -> String {
        format!("{:032x}", self.digest)
    }
}

impl PartialEq for KernelId {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest && self.name == other.name
    }
}

impl Eq for KernelId {}

impl Hash for KernelId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The digest already covers the name: hashing the name again would
        // only make every lookup on the hot path longer.
        state.write_u128(self.digest);
    }
}

impl PartialOrd for KernelId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KernelId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.name, self.digest).cmp(&(&other.name, other.digest))
    }
}

impl fmt::Display for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{:016x}", self.name, (self.digest >> 64) as u64)
    }
}

impl fmt::Debug for KernelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelId({}#{:032x})", self.name, self.digest)
    }
}

/// Feeds a kernel's parameters into its [`KernelId`].
///
/// Parameters go through [`Hash`] into an unseeded XXH3-128 hasher, so the
/// same parameters give the same id in every process and every build of the
/// same program. Feed every parameter that changes the generated source; the
/// order matters.
pub struct KernelIdBuilder {
    name: Cow<'static, str>,
    hasher: Xxh3,
}

impl KernelIdBuilder {
    fn named(name: impl Into<Cow<'static, str>>) -> Self {
        let name = name.into();
        let mut hasher = Xxh3::new();
        hasher.update(name.as_bytes());
        // A separator, so that a name ending in a parameter's bytes cannot
        // collide with a shorter name followed by that parameter.
        hasher.update(&[0xff]);
        Self { name, hasher }
    }

    /// Adds one parameter.
    pub fn parameter<P: Hash + ?Sized>(mut self, parameter: &P) -> Self {
        parameter.hash(&mut StableHasher(&mut self.hasher));
        self
    }

    /// Adds raw bytes, for parameters that are already text or a digest.
    pub fn bytes(mut self, bytes: &[u8]) -> Self {
        self.hasher.update(&(bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
        self
    }

    /// The finished id.
    pub fn build(self) -> KernelId {
        KernelId {
            digest: self.hasher.digest128(),
            name: self.name,
        }
    }
}

/// Adapts XXH3 to [`Hasher`] with fixed little-endian integer encoding, so an
/// id does not depend on how `Hasher`'s defaults encode integers.
struct StableHasher<'a>(&'a mut Xxh3);

impl Hasher for StableHasher<'_> {
    fn finish(&self) -> u64 {
        self.0.digest()
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn write_u8(&mut self, value: u8) {
        self.0.update(&[value]);
    }

    fn write_u16(&mut self, value: u16) {
        self.0.update(&value.to_le_bytes());
    }

    fn write_u32(&mut self, value: u32) {
        self.0.update(&value.to_le_bytes());
    }

    fn write_u64(&mut self, value: u64) {
        self.0.update(&value.to_le_bytes());
    }

    fn write_u128(&mut self, value: u128) {
        self.0.update(&value.to_le_bytes());
    }

    fn write_usize(&mut self, value: usize) {
        // Widened, so a 32-bit and a 64-bit build of one program agree.
        self.0.update(&(value as u64).to_le_bytes());
    }
}

/// A kernel under the compile choice of one target: what an artifact is
/// compiled for, and the key of everything a loader keeps.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ArtifactId<V> {
    /// The kernel.
    pub kernel: KernelId,
    /// The target's compile choice: architecture, fast-math, and so on.
    pub variant: V,
}

impl<V> ArtifactId<V> {
    /// The id of `kernel` compiled under `variant`.
    pub fn new(kernel: KernelId, variant: V) -> Self {
        Self { kernel, variant }
    }
}

impl<V: fmt::Debug> fmt::Debug for ArtifactId<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{:?}", self.kernel, self.variant)
    }
}

impl<V: fmt::Debug> fmt::Display for ArtifactId<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{:?}", self.kernel, self.variant)
    }
}

/// The device a [`KernelCache`](crate::KernelCache) loads its kernels on:
/// the backend's name and the number the backend tells its devices apart
/// by (an ordinal, or a number derived from a bus id or UUID).
///
/// A loaded kernel is a device object: a module loaded on one GPU cannot be
/// launched on another. Every call that hands out a kernel names the device
/// the caller launches on, and a cache refuses any device but its own.
///
/// ```
/// use kiln_engine::DeviceId;
///
/// let first = DeviceId::new("cuda", 0);
/// assert_eq!(first.to_string(), "cuda:0");
/// assert_ne!(first, DeviceId::new("cuda", 1));
/// assert_ne!(first, DeviceId::new("hip", 0));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    // The number first: it is what differs between the devices of one
    // backend, so comparing it first settles most comparisons in one step.
    number: u64,
    backend: &'static str,
}

impl DeviceId {
    /// Device `number` of `backend`.
    pub const fn new(backend: &'static str, number: u64) -> Self {
        Self { number, backend }
    }

    /// The backend's name.
    pub const fn backend(&self) -> &'static str {
        self.backend
    }

    /// The number the backend tells its devices apart by.
    pub const fn number(&self) -> u64 {
        self.number
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.backend, self.number)
    }
}

impl fmt::Debug for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceId({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Saxpy;
    struct Reduce;

    #[test]
    fn the_same_parameters_give_the_same_id() {
        assert_eq!(
            KernelId::of::<Saxpy>(&(256u32, "f32")),
            KernelId::of::<Saxpy>(&(256u32, "f32"))
        );
    }

    #[test]
    fn a_changed_parameter_or_type_gives_another_id() {
        let base = KernelId::of::<Saxpy>(&(256u32, "f32"));
        assert_ne!(base, KernelId::of::<Saxpy>(&(512u32, "f32")));
        assert_ne!(base, KernelId::of::<Reduce>(&(256u32, "f32")));
    }

    #[test]
    fn an_id_is_the_same_in_every_process() {
        // A fixed value computed once: if this changes, every store on every
        // machine misses, so a change here must be deliberate and bump the
        // store format.
        let id = KernelId::named("kiln.stable")
            .parameter(&42u64)
            .parameter("tile")
            .build();
        assert_eq!(id.digest_hex(), STABLE_DIGEST);
    }

    const STABLE_DIGEST: &str = "fde512b9ead6ebcca8ae9aa9fa43a2ff";

    #[test]
    fn an_id_survives_serialization() {
        let id = KernelId::of::<Saxpy>(&7u8);
        let text = serde_json::to_string(&id).expect("an id serializes");
        let back: KernelId = serde_json::from_str(&text).expect("an id deserializes");
        assert_eq!(back, id);
        assert_eq!(back.name(), id.name());
    }
}
