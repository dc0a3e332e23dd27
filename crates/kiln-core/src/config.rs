//! The loader's settings: a plain struct with defaults, each overridable by a
//! `KILN_*` environment variable.
//!
//! | variable | field | default |
//! |---|---|---|
//! | `KILN_PARALLELISM` | [`LoaderConfig::parallelism`] | the machine's available cores |
//! | `KILN_RECORD_LIMIT` | [`LoaderConfig::record_limit`] | 256 batches |

use std::num::NonZeroUsize;

use crate::error::ConfigError;

/// How a [`KernelLoader`](crate::KernelLoader) runs its batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoaderConfig {
    /// How many workers lower and finalize at once. Default: the machine's
    /// available cores. `KILN_PARALLELISM`.
    pub parallelism: NonZeroUsize,
    /// How many batch records the loader keeps before dropping the oldest:
    /// records are for inspection, and a long-running process must not
    /// grow without bound. `KILN_RECORD_LIMIT`.
    pub record_limit: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            parallelism: std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN),
            record_limit: 256,
        }
    }
}

impl LoaderConfig {
    /// The defaults, with every `KILN_*` variable that is set applied.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read, naming it and what it
    /// should hold.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::default().with_overrides(|name| std::env::var(name).ok())
    }

    /// The defaults with the `KILN_*` variables applied, or the defaults alone
    /// with a logged warning when a variable is invalid: a misspelt setting
    /// must not stop a program from launching kernels.
    pub fn from_env_or_default() -> Self {
        Self::from_env().unwrap_or_else(|error| {
            log::warn!("{error}; using the default loader settings");
            Self::default()
        })
    }

    /// Applies the overrides `lookup` finds, by variable name.
    ///
    /// # Errors
    ///
    /// A variable that is set and cannot be read.
    pub fn with_overrides(
        mut self,
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        if let Some(value) = lookup("KILN_PARALLELISM") {
            self.parallelism = value.trim().parse().map_err(|_| ConfigError {
                variable: "KILN_PARALLELISM",
                value,
                expected: "a whole number of workers, at least 1",
            })?;
        }
        if let Some(value) = lookup("KILN_RECORD_LIMIT") {
            self.record_limit = value.trim().parse().map_err(|_| ConfigError {
                variable: "KILN_RECORD_LIMIT",
                value,
                expected: "a whole number of batch records to keep",
            })?;
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_override_the_defaults() {
        let config = LoaderConfig::default()
            .with_overrides(|name| match name {
                "KILN_PARALLELISM" => Some("3".into()),
                "KILN_RECORD_LIMIT" => Some(" 10 ".into()),
                _ => None,
            })
            .expect("valid values");
        assert_eq!(config.parallelism.get(), 3);
        assert_eq!(config.record_limit, 10);
    }

    #[test]
    fn an_invalid_variable_is_named_in_the_error() {
        let error = LoaderConfig::default()
            .with_overrides(|name| (name == "KILN_PARALLELISM").then(|| "0".into()))
            .expect_err("zero workers is invalid");
        assert_eq!(error.variable, "KILN_PARALLELISM");
        assert!(error.to_string().contains("at least 1"), "{error}");
    }
}
