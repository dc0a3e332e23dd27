//! A header a kernel's source includes, supplied with its text.

use serde::{Deserialize, Serialize};

/// A header the source includes by `name` (`#include "name"`), handed to
/// the compiler with its text rather than read from disk, so that its text
/// is part of the kernel's id and of its artifact's key: editing it
/// compiles again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Header {
    /// The name the source includes it by: `"ops.h"` for
    /// `#include "ops.h"`.
    pub name: String,
    /// Its text.
    pub text: String,
}

impl Header {
    /// The header `name`, holding `text`.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }
}
