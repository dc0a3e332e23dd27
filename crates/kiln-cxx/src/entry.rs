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

/// The symbols of a loaded module's entry points (B6), as the compiler
/// lowered them: the first entry's, and each other entry's name expression
/// with its symbol, in the order the kernel named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySymbols {
    first: String,
    more: Vec<(String, String)>,
}

impl EntrySymbols {
    /// The first entry's symbol, and the other entries'
    /// `(name expression, symbol)`.
    pub fn new(first: String, more: Vec<(String, String)>) -> Self {
        Self { first, more }
    }

    /// The first entry's symbol.
    pub fn first(&self) -> &str {
        &self.first
    }

    /// The other entries, `(name expression, symbol)`.
    pub fn more(&self) -> &[(String, String)] {
        &self.more
    }

    /// The symbol of the other entry `expression`; `None` for a name that
    /// is none of them.
    pub fn symbol_of(&self, expression: &str) -> Option<&str> {
        self.more
            .iter()
            .find(|(entry, _)| entry == expression)
            .map(|(_, symbol)| symbol.as_str())
    }

    /// Where the other entry `expression` stands among
    /// [`more`](Self::more); `None` for a name that is none of them.
    pub fn position(&self, expression: &str) -> Option<usize> {
        self.more.iter().position(|(entry, _)| entry == expression)
    }
}

#[cfg(test)]
mod tests {
    use super::EntrySymbols;

    // B6
    #[test]
    fn another_entry_is_found_by_its_expression_never_by_its_symbol() {
        let symbols = EntrySymbols::new(
            "first".to_owned(),
            vec![
                ("scale<2>".to_owned(), "_Z5scaleILi2EEvPf".to_owned()),
                ("shift".to_owned(), "shift".to_owned()),
            ],
        );
        assert_eq!(symbols.first(), "first");
        assert_eq!(symbols.symbol_of("scale<2>"), Some("_Z5scaleILi2EEvPf"));
        assert_eq!(symbols.position("shift"), Some(1));
        assert_eq!(symbols.symbol_of("_Z5scaleILi2EEvPf"), None);
        assert_eq!(symbols.symbol_of("first"), None, "the first is no other");
        assert_eq!(symbols.position("absent"), None);
    }
}
