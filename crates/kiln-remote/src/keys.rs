//! The keys that sign and verify remote entries (P10), as text a person
//! can copy, from variables or files, and never shown in logs.
//!
//! Two modes, which may be combined:
//!
//! - a **fleet key** ([`FleetKey`], `KILN_REMOTE_KEY`): one secret that
//!   every member holds; each entry carries a keyed BLAKE3 of itself. Any
//!   member can write.
//! - **Ed25519** ([`SigningKey`], `KILN_REMOTE_SIGNING_KEY`, and
//!   [`PublicKey`]s, `KILN_REMOTE_TRUSTED_KEYS`): build machines hold a
//!   signing key, every node holds the public keys it trusts. A node
//!   without a signing key (or fleet key) reads and never writes.
//!
//! Each key is text with a prefix that says its kind
//! (`kiln-fleet-key-v1:`, `kiln-signing-key-v1:`, `kiln-public-key-v1:`)
//! and 64 hex digits, so that a public key given where a secret belongs is
//! refused with a message rather than used.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};

const FLEET_PREFIX: &str = "kiln-fleet-key-v1:";
const SIGNING_PREFIX: &str = "kiln-signing-key-v1:";
const PUBLIC_PREFIX: &str = "kiln-public-key-v1:";

/// The fleet's shared secret: keyed BLAKE3 over every entry. Its `Debug`
/// shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct FleetKey([u8; 32]);

/// A builder's Ed25519 signing key. Its `Debug` shows only its public key.
#[derive(Clone)]
pub struct SigningKey(ed25519_compact::KeyPair);

/// An Ed25519 public key that a node trusts to sign entries.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl FleetKey {
    /// A fleet key from its text (`kiln-fleet-key-v1:` and 64 hex digits).
    ///
    /// # Errors
    ///
    /// The text is not a fleet key; the message does not repeat it.
    pub fn from_text(text: &str) -> Result<Self> {
        parse_hex(text, FLEET_PREFIX, "a fleet key").map(Self)
    }

    /// The key as text, to write to a key file or a secret store: the only
    /// way the secret leaves this type.
    pub fn secret_text(&self) -> String {
        format!("{FLEET_PREFIX}{}", kiln_engine::store::hex(&self.0))
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FleetKey(<secret>)")
    }
}

impl SigningKey {
    /// A signing key from its text (`kiln-signing-key-v1:` and the 64 hex
    /// digits of its seed).
    ///
    /// # Errors
    ///
    /// The text is not a signing key; the message does not repeat it.
    pub fn from_text(text: &str) -> Result<Self> {
        let seed = parse_hex(text, SIGNING_PREFIX, "a signing key")?;
        ed25519_compact::KeyPair::try_from_seed(ed25519_compact::Seed::new(seed))
            .map(Self)
            .map_err(|_| bad_key("a signing key", "the seed is all zeros"))
    }

    /// The key as text, to write to a key file: the only way the secret
    /// leaves this type.
    pub fn secret_text(&self) -> String {
        format!(
            "{SIGNING_PREFIX}{}",
            kiln_engine::store::hex(&self.0.sk.seed()[..])
        )
    }

    /// The public key that verifies what this key signs: what nodes list
    /// in `KILN_REMOTE_TRUSTED_KEYS`.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(*self.0.pk)
    }

    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        *self.0.sk.sign(message, None)
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(<secret> for {})", self.public_key())
    }
}

impl PublicKey {
    /// A public key from its text (`kiln-public-key-v1:` and 64 hex
    /// digits).
    ///
    /// # Errors
    ///
    /// The text is not a public key, or not a usable Ed25519 point.
    pub fn from_text(text: &str) -> Result<Self> {
        let bytes = parse_hex(text, PUBLIC_PREFIX, "a public key")?;
        ed25519_compact::PublicKey::new(bytes)
            .validate()
            .map_err(|_| bad_key("a public key", "not a valid Ed25519 public key"))?;
        Ok(Self(bytes))
    }

    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub(crate) fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        ed25519_compact::PublicKey::new(self.0)
            .verify(message, &ed25519_compact::Signature::new(*signature))
            .is_ok()
    }
}

/// `kiln-public-key-v1:<hex>`: public, so it may be shown and logged.
impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", kiln_engine::store::hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Every key a remote store signs and verifies with.
///
/// ```
/// use kiln_remote::{Keys, keygen};
///
/// let fleet = keygen::fleet_key()?;
/// let keys = Keys::with_overrides(|name| {
///     (name == "KILN_REMOTE_KEY").then(|| fleet.secret_text())
/// })?;
/// assert!(keys.can_write());
/// // A node with no key at all is refused, with a message saying how to
/// // make one.
/// let none = Keys::with_overrides(|_| None).unwrap_err();
/// assert!(none.to_string().contains("kiln keygen"));
/// # Ok::<(), kiln_remote::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Keys {
    /// The fleet's shared secret, if the fleet uses one.
    pub fleet: Option<FleetKey>,
    /// This builder's signing key, if it is a builder.
    pub signing: Option<SigningKey>,
    /// The public keys whose signatures this node accepts (its own signing
    /// key's is accepted without being listed).
    pub trusted: Vec<PublicKey>,
}

impl Keys {
    /// The keys of `KILN_REMOTE_KEY`, `KILN_REMOTE_SIGNING_KEY` and
    /// `KILN_REMOTE_TRUSTED_KEYS` (each the key itself, or the path of a
    /// file holding it; trusted keys separated by commas, spaces or lines).
    ///
    /// # Errors
    ///
    /// [`Error::NoKey`] when none is set, [`Error::BadKey`] when one cannot
    /// be read.
    pub fn from_env() -> Result<Self> {
        Self::with_overrides(|name| std::env::var(name).ok())
    }

    /// As [`from_env`](Self::from_env), with the variables `lookup` gives.
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env).
    pub fn with_overrides(lookup: impl Fn(&'static str) -> Option<String>) -> Result<Self> {
        let set = |name: &'static str| lookup(name).filter(|value| !value.trim().is_empty());
        let mut keys = Self::default();
        if let Some(value) = set("KILN_REMOTE_KEY") {
            let text = key_text("KILN_REMOTE_KEY", &value)?;
            keys.fleet =
                Some(FleetKey::from_text(&text).map_err(|error| named("KILN_REMOTE_KEY", error))?);
        }
        if let Some(value) = set("KILN_REMOTE_SIGNING_KEY") {
            let text = key_text("KILN_REMOTE_SIGNING_KEY", &value)?;
            keys.signing = Some(
                SigningKey::from_text(&text)
                    .map_err(|error| named("KILN_REMOTE_SIGNING_KEY", error))?,
            );
        }
        if let Some(value) = set("KILN_REMOTE_TRUSTED_KEYS") {
            for item in value
                .split([',', ' ', '\n', '\t'])
                .filter(|item| !item.is_empty())
            {
                let text = key_text("KILN_REMOTE_TRUSTED_KEYS", item)?;
                for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
                    keys.trusted.push(
                        PublicKey::from_text(line)
                            .map_err(|error| named("KILN_REMOTE_TRUSTED_KEYS", error))?,
                    );
                }
            }
        }
        keys.check()?;
        Ok(keys)
    }

    /// Refuses a set of keys that can neither sign nor verify.
    pub(crate) fn check(&self) -> Result<()> {
        if self.fleet.is_none() && self.signing.is_none() && self.trusted.is_empty() {
            return Err(Error::NoKey);
        }
        Ok(())
    }

    /// Whether these keys can sign entries: a node that cannot reads the
    /// remote and never writes it.
    pub fn can_write(&self) -> bool {
        self.fleet.is_some() || self.signing.is_some()
    }

    /// Whether a signature by `public` is accepted.
    pub(crate) fn trusts(&self, public: &PublicKey) -> bool {
        self.trusted.contains(public)
            || self
                .signing
                .as_ref()
                .is_some_and(|signing| signing.public_key() == *public)
    }
}

/// The key text a variable holds: itself, or the content of the file it
/// names.
fn key_text(variable: &'static str, value: &str) -> Result<String> {
    let value = value.trim();
    if value.starts_with("kiln-") {
        return Ok(value.to_owned());
    }
    std::fs::read_to_string(Path::new(value))
        .map(|text| text.trim().to_owned())
        .map_err(|error| Error::BadKey {
            source_name: variable.to_owned(),
            problem: format!(
                "holds no key text (`kiln-...`) and names no readable key file ({error})"
            ),
        })
}

fn named(variable: &'static str, error: Error) -> Error {
    match error {
        Error::BadKey { problem, .. } => Error::BadKey {
            source_name: variable.to_owned(),
            problem,
        },
        other => other,
    }
}

fn bad_key(what: &str, problem: &str) -> Error {
    Error::BadKey {
        source_name: what.to_owned(),
        problem: problem.to_owned(),
    }
}

/// The 32 bytes of `text` after `prefix`, checked without echoing `text`.
fn parse_hex(text: &str, prefix: &str, what: &str) -> Result<[u8; 32]> {
    let text = text.trim();
    let Some(digits) = text.strip_prefix(prefix) else {
        let found = [FLEET_PREFIX, SIGNING_PREFIX, PUBLIC_PREFIX]
            .into_iter()
            .find(|other| text.starts_with(other));
        let problem = match found {
            Some(other) => format!("expected {what} ({prefix}...), found a key of kind {other}"),
            None => format!("expected {what}: text that starts with {prefix}"),
        };
        return Err(bad_key(what, &problem));
    };
    let digits = digits.as_bytes();
    if digits.len() != 64 {
        return Err(bad_key(what, "expected 64 hex digits after the prefix"));
    }
    let mut bytes = [0u8; 32];
    for (index, pair) in digits.chunks_exact(2).enumerate() {
        let digit = |byte: u8| (byte as char).to_digit(16);
        match (digit(pair[0]), digit(pair[1])) {
            (Some(high), Some(low)) => bytes[index] = (high * 16 + low) as u8,
            _ => return Err(bad_key(what, "holds a character that is not a hex digit")),
        }
    }
    Ok(bytes)
}

/// New keys, from the operating system's random bytes: the library side
/// of `kiln keygen`.
///
/// ```
/// use kiln_remote::keygen;
///
/// // A fleet that trusts every member: one secret for all.
/// let fleet = keygen::fleet_key()?;
/// assert!(fleet.secret_text().starts_with("kiln-fleet-key-v1:"));
///
/// // Split trust: builders keep the signing key, nodes get the public key.
/// let builder = keygen::signing_key()?;
/// let public = builder.public_key().to_string();
/// assert!(public.starts_with("kiln-public-key-v1:"));
/// assert_eq!(kiln_remote::PublicKey::from_text(&public)?, builder.public_key());
/// # Ok::<(), kiln_remote::Error>(())
/// ```
pub mod keygen {
    use super::{FleetKey, SigningKey};
    use crate::error::{Error, Result};

    /// A new fleet key.
    ///
    /// # Errors
    ///
    /// The operating system gave no random bytes.
    pub fn fleet_key() -> Result<FleetKey> {
        random_bytes().map(FleetKey)
    }

    /// A new Ed25519 signing key; its
    /// [`public_key`](SigningKey::public_key) goes to every node.
    ///
    /// # Errors
    ///
    /// The operating system gave no random bytes.
    pub fn signing_key() -> Result<SigningKey> {
        loop {
            let seed = random_bytes()?;
            // An all-zero seed is refused by Ed25519 and has odds of 2^-256.
            if let Ok(pair) =
                ed25519_compact::KeyPair::try_from_seed(ed25519_compact::Seed::new(seed))
            {
                return Ok(SigningKey(pair));
            }
        }
    }

    pub(crate) fn random_bytes() -> Result<[u8; 32]> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|error| Error::Random(error.to_string()))?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_their_text() {
        // P10: keys made by keygen read back as the same keys.
        let fleet = keygen::fleet_key().expect("random bytes");
        assert_eq!(FleetKey::from_text(&fleet.secret_text()).unwrap(), fleet);
        let signing = keygen::signing_key().expect("random bytes");
        let again = SigningKey::from_text(&signing.secret_text()).unwrap();
        assert_eq!(again.public_key(), signing.public_key());
        let public = PublicKey::from_text(&signing.public_key().to_string()).unwrap();
        assert!(public.verify(b"message", &signing.sign(b"message")));
        assert!(!public.verify(b"another", &signing.sign(b"message")));
    }

    #[test]
    fn a_key_of_the_wrong_kind_is_refused_without_being_shown() {
        // P10: a public key is never taken for a secret, and no message
        // repeats a secret.
        let signing = keygen::signing_key().unwrap();
        let error = FleetKey::from_text(&signing.secret_text()).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("kiln-signing-key-v1:"), "{message}");
        assert!(!message.contains(&signing.secret_text()), "{message}");
        assert!(!format!("{signing:?}").contains(&signing.secret_text()[20..]));
        let fleet = keygen::fleet_key().unwrap();
        assert!(!format!("{fleet:?}").contains(&fleet.secret_text()[18..]));
        assert!(FleetKey::from_text("kiln-fleet-key-v1:zz").is_err());
    }

    #[test]
    fn no_key_refuses_and_says_how_to_make_one() {
        // P10: no key configured, the remote tier does not start.
        let error = Keys::with_overrides(|_| None).unwrap_err();
        assert!(matches!(error, Error::NoKey));
        assert!(error.to_string().contains("kiln keygen"));
    }

    #[test]
    fn a_node_with_only_trusted_keys_cannot_write() {
        // P10: nodes hold only public keys and never write.
        let builder = keygen::signing_key().unwrap();
        let public = builder.public_key().to_string();
        let keys = Keys::with_overrides(|name| {
            (name == "KILN_REMOTE_TRUSTED_KEYS").then(|| format!("{public}, {public}"))
        })
        .unwrap();
        assert!(!keys.can_write());
        assert!(keys.trusts(&builder.public_key()));
    }
}
