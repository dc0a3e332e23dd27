//! gfx architectures, and the ones the installed compiler supports.
//!
//! hipRTC does not refuse a target its compiler lacks: comgr aborts the
//! whole process (SIGABRT) on it, and on a processor feature the processor
//! does not have (`gfx1030:xnack+`). So every target is checked against
//! comgr's own list before hipRTC sees it: the processor must be one comgr
//! lists, and a target with features must be a full ISA name comgr accepts.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// comgr's prefix of every AMD GPU ISA name for HSA code objects.
const ISA_PREFIX: &str = "amdgcn-amd-amdhsa--";

/// A gfx architecture: a processor (`gfx90a`) and, optionally, the target
/// features a code object is built for (`gfx90a:sramecc+:xnack-`).
///
/// Building one checks only its spelling; whether the installed compiler
/// supports it is [`HipCompiler::check_target`](crate::HipCompiler::check_target)'s question.
///
/// ```
/// use kiln_hip::Architecture;
///
/// let architecture: Architecture = "gfx90a:xnack-".parse()?;
/// assert_eq!(architecture.processor(), "gfx90a");
/// assert_eq!(architecture.features().collect::<Vec<_>>(), ["xnack-"]);
/// assert!("sm_90".parse::<Architecture>().is_err());
/// # Ok::<(), kiln_hip::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Architecture(String);

impl Architecture {
    /// Reads an architecture name.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArchitecture`] for a name that is not `gfx` and hex
    /// digits, followed by `:feature+` or `:feature-` parts.
    pub fn new(name: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidArchitecture {
            name: name.to_owned(),
            reason,
        };
        let mut parts = name.split(':');
        let processor = parts.next().unwrap_or_default();
        let Some(digits) = processor.strip_prefix("gfx") else {
            return Err(invalid("it does not start with gfx"));
        };
        if digits.is_empty()
            || digits.len() > 6
            || !digits
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        {
            return Err(invalid(
                "gfx is followed by something other than hex digits",
            ));
        }
        for feature in parts {
            let Some(word) = feature
                .strip_suffix('+')
                .or_else(|| feature.strip_suffix('-'))
            else {
                return Err(invalid("a feature does not end in + or -"));
            };
            if word.is_empty() || !word.bytes().all(|byte| byte.is_ascii_lowercase()) {
                return Err(invalid("a feature is not a lower-case word"));
            }
        }
        Ok(Self(name.to_owned()))
    }

    /// The processor alone: `gfx90a` of `gfx90a:xnack-`.
    pub fn processor(&self) -> &str {
        self.0.split(':').next().unwrap_or_default()
    }

    /// The features, such as `xnack-`, in the order given.
    pub fn features(&self) -> impl Iterator<Item = &str> {
        self.0.split(':').skip(1)
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The full ISA name comgr knows it by.
    pub(crate) fn isa_name(&self) -> String {
        format!("{ISA_PREFIX}{}", self.0)
    }
}

impl FromStr for Architecture {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        Self::new(name)
    }
}

impl TryFrom<String> for Architecture {
    type Error = Error;

    fn try_from(name: String) -> Result<Self> {
        Self::new(&name)
    }
}

impl From<Architecture> for String {
    fn from(architecture: Architecture) -> Self {
        architecture.0
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The targets the installed comgr — and so hipRTC — can compile for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupportedTargets {
    processors: Vec<String>,
    comgr_version: String,
}

impl SupportedTargets {
    /// The list comgr gave, as full ISA names, and comgr's version.
    pub(crate) fn from_isa_names(isa_names: &[String], comgr_version: String) -> Self {
        let mut processors: Vec<String> = isa_names
            .iter()
            .filter_map(|isa| isa.strip_prefix(ISA_PREFIX))
            .map(|target| target.split(':').next().unwrap_or(target).to_owned())
            .collect();
        processors.dedup();
        Self {
            processors,
            comgr_version,
        }
    }

    /// Every processor comgr lists (`gfx90a`, `gfx1030`, ...).
    pub fn processors(&self) -> &[String] {
        &self.processors
    }

    /// comgr's version, `major.minor`.
    pub fn comgr_version(&self) -> &str {
        &self.comgr_version
    }

    /// Whether comgr lists `architecture`'s processor.
    pub fn has_processor(&self, architecture: &Architecture) -> bool {
        self.processors
            .iter()
            .any(|processor| processor == architecture.processor())
    }

    /// Refuses `architecture` unless comgr lists its processor and, when it has
    /// features, `accepts_features` says comgr accepts its full ISA name.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedArchitecture`] listing every supported processor,
    /// or the error `accepts_features` gave.
    pub(crate) fn check(
        &self,
        architecture: &Architecture,
        accepts_features: impl FnOnce(&Architecture) -> Result<bool>,
    ) -> Result<()> {
        let refuse = |features_refused| Error::UnsupportedArchitecture {
            requested: architecture.to_string(),
            features_refused,
            supported: self.processors.clone(),
            comgr_version: self.comgr_version.clone(),
        };
        if !self.has_processor(architecture) {
            return Err(refuse(false));
        }
        if architecture.features().next().is_some() && !accepts_features(architecture)? {
            return Err(refuse(true));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comgr_5_2() -> SupportedTargets {
        let names: Vec<String> = ["gfx906", "gfx908", "gfx90a", "gfx1030"]
            .iter()
            .map(|processor| format!("{ISA_PREFIX}{processor}"))
            .collect();
        SupportedTargets::from_isa_names(&names, "2.4".to_owned())
    }

    #[test]
    fn architecture_names_are_a_processor_and_signed_features() {
        let architecture = Architecture::new("gfx90a:sramecc+:xnack-").expect("a valid name");
        assert_eq!(architecture.processor(), "gfx90a");
        assert_eq!(
            architecture.features().collect::<Vec<_>>(),
            ["sramecc+", "xnack-"]
        );
        for bad in [
            "",
            "sm_90",
            "gfx",
            "gfx90z",
            "gfx90a:xnack",
            "gfx90a:",
            "gfx90a --offload-arch=gfx1100",
            "gfx90a:XNACK+",
        ] {
            assert!(Architecture::new(bad).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn a_stored_architecture_is_checked_like_a_parsed_one() {
        // Serde reads a `Architecture` through `TryFrom<String>`, so a flag cannot
        // hide in a variant read back from a store.
        assert!(Architecture::try_from("gfx90a -mllvm -x".to_owned()).is_err());
        assert!(Architecture::try_from("gfx90a".to_owned()).is_ok());
    }

    // B2
    #[test]
    fn an_unlisted_processor_is_refused_with_the_supported_list() {
        let supported = comgr_5_2();
        let error = supported
            .check(&Architecture::new("gfx1100").expect("valid"), |_| Ok(true))
            .expect_err("gfx1100 is not listed");
        let message = error.to_string();
        assert!(
            message.contains("gfx1100") && message.contains("gfx90a, gfx1030"),
            "{message}"
        );
    }

    // B2
    #[test]
    fn features_comgr_refuses_are_refused_before_hiprtc() {
        let supported = comgr_5_2();
        let architecture = Architecture::new("gfx1030:xnack+").expect("valid");
        let error = supported
            .check(&architecture, |_| Ok(false))
            .expect_err("comgr refuses the features");
        assert!(
            matches!(
                error,
                Error::UnsupportedArchitecture {
                    features_refused: true,
                    ..
                }
            ),
            "{error}"
        );
        supported
            .check(&Architecture::new("gfx90a").expect("valid"), |_| {
                panic!("a target without features needs no second question")
            })
            .expect("gfx90a is listed");
    }
}
