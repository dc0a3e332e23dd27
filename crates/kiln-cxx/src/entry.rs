//! The function a C++ kernel launches, named as its source names it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The function a kernel launches, as the run-time compiler (NVRTC,
/// hipRTC) names it in the source: a plain name (`saxpy`, usually declared
/// `extern "C"`), a kernel in a namespace (`ops::saxpy`) or a template
/// instantiation (`reduce<float, 256>`).
///
/// The compiler resolves either to the symbol in the compiled image (the
/// *lowered* name, mangled for C++ linkage), so templates need no
/// `extern "C"` wrapper.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EntryPoint(String);

impl EntryPoint {
    /// The entry point named by `expression`.
    pub fn new(expression: impl Into<String>) -> Self {
        Self(expression.into())
    }

    /// The name expression, as written.
    pub fn expression(&self) -> &str {
        &self.0
    }
}

impl From<&str> for EntryPoint {
    fn from(expression: &str) -> Self {
        Self::new(expression)
    }
}

impl From<String> for EntryPoint {
    fn from(expression: String) -> Self {
        Self::new(expression)
    }
}

impl fmt::Display for EntryPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
