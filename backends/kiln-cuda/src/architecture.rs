//! GPU architectures: what a cubin is built for and a device runs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An NVIDIA GPU architecture, `sm_<major><minor>`: sm_90 is Hopper (H100,
/// H200), sm_80 Ampere (A100).
///
/// ```
/// use kiln_cuda::Architecture;
///
/// let hopper: Architecture = "sm_90".parse().expect("a valid name");
/// assert_eq!(hopper, Architecture::new(9, 0));
/// assert_eq!(hopper.to_string(), "sm_90");
/// assert!(hopper.runs_cubin_of(Architecture::new(9, 0)));
/// assert!(!hopper.runs_cubin_of(Architecture::new(8, 0)));
/// assert!(hopper.runs_ptx_of(Architecture::new(8, 0)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Architecture {
    /// The compute capability's major number.
    pub major: u32,
    /// The compute capability's minor number.
    pub minor: u32,
}

impl Architecture {
    /// `sm_<major><minor>`.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// NVRTC's option selecting this architecture: a cubin for it, and PTX
    /// for its virtual architecture.
    pub fn nvrtc_option(self) -> String {
        format!("-arch={self}")
    }

    /// Whether a device of this architecture runs a cubin built for `built`:
    /// the same major version, and a minor version no newer than its own.
    pub fn runs_cubin_of(self, built: Architecture) -> bool {
        self.major == built.major && self.minor >= built.minor
    }

    /// Whether a device of this architecture can compile PTX written for
    /// `built` at load time: any architecture no newer than its own.
    pub fn runs_ptx_of(self, built: Architecture) -> bool {
        built <= self
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// The text was not `sm_<digits>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an architecture: expected sm_<major><minor>, such as sm_90")]
pub struct ArchitectureParseError(pub String);

impl FromStr for Architecture {
    type Err = ArchitectureParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || ArchitectureParseError(text.to_owned());
        let digits = text
            .trim()
            .strip_prefix("sm_")
            .or_else(|| text.trim().strip_prefix("compute_"))
            .ok_or_else(invalid)?;
        if digits.len() < 2 || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(invalid());
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        Ok(Self::new(
            major.parse().map_err(|_| invalid())?,
            minor.parse().map_err(|_| invalid())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_read_and_print_as_nvidia_names_them() {
        assert_eq!("sm_100".parse(), Ok(Architecture::new(10, 0)));
        assert_eq!("sm_86".parse(), Ok(Architecture::new(8, 6)));
        assert_eq!(Architecture::new(12, 1).to_string(), "sm_121");
        assert!("sm_".parse::<Architecture>().is_err());
        assert!("gfx90a".parse::<Architecture>().is_err());
    }
}
