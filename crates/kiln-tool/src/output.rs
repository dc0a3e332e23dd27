//! How a command prints its result: an aligned table for people, or JSON
//! with `--json`; shared by the commands and the remote tier's copies.

use anyhow::Result;
use serde::Serialize;

use crate::console::outln;

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// JSON instead of tables.
    pub json: bool,
    /// Tables at full width, every value whole (`--wide`).
    pub wide: bool,
}

impl Output {
    /// Prints `value` as JSON when asked to, else runs `human`.
    pub fn print<T: Serialize>(&self, value: &T, human: impl FnOnce()) -> Result<()> {
        if self.json {
            outln!("{}", serde_json::to_string_pretty(value)?);
        } else {
            human();
        }
        Ok(())
    }
}
