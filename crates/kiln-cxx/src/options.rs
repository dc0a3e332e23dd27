//! The options every C++ compiler takes, as each backend's options type
//! sets them: each backend keeps its own type (its fields, its order of
//! arguments, its part of a kernel's id), and the setters they share are
//! written once, by [`option_setters!`](crate::option_setters), as
//! inherent methods of each.

/// Writes, inside an `impl` of a backend's options type, the setters of
/// the options every C++ compiler takes: the standard, fast math and
/// defines. The type has the fields `standard: Option<CxxStandard>`,
/// `fast_math: bool` and `defines: Vec<(String, Option<String>)>`, and
/// its module has `CxxStandard` in scope, which the docs link to.
#[macro_export]
macro_rules! option_setters {
    () => {
        /// Compiles in C++ `standard` ([`CxxStandard::Cxx20`], say).
        pub fn standard(mut self, standard: $crate::CxxStandard) -> Self {
            self.standard = Some(standard);
            self
        }

        /// Turns fast math on or off: floating-point arithmetic may then be
        /// reordered and approximated.
        pub fn fast_math(mut self, fast_math: bool) -> Self {
            self.fast_math = fast_math;
            self
        }

        /// Defines `name` as `value` (`-DNAME=VALUE`). Defines are kept in
        /// canonical order (by name), so the order a program gives them in
        /// changes no id and no key.
        pub fn define(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            $crate::defines::insert(&mut self.defines, (name.into(), Some(value.into())));
            self
        }

        /// Defines `name` with no value (`-DNAME`), in canonical order.
        pub fn define_name(mut self, name: impl Into<String>) -> Self {
            $crate::defines::insert(&mut self.defines, (name.into(), None));
            self
        }
    };
}
