//! The C++ standard a kernel is compiled in.

use serde::{Deserialize, Serialize};

/// A C++ standard for the compiler's `-std`: the ones NVRTC 13 and hipRTC
/// (clang) accept.
///
/// Its variants' order is part of the ids of CUDA kernels that choose one
/// (an option's hash includes the variant's position), so a new standard
/// goes at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CxxStandard {
    /// C++03.
    Cxx03,
    /// C++11.
    Cxx11,
    /// C++14.
    Cxx14,
    /// C++17.
    Cxx17,
    /// C++20.
    Cxx20,
}

impl CxxStandard {
    /// Every standard, oldest first.
    pub const ALL: [Self; 5] = [
        Self::Cxx03,
        Self::Cxx11,
        Self::Cxx14,
        Self::Cxx17,
        Self::Cxx20,
    ];

    /// The argument that selects it (`-std=c++17`), the same for NVRTC and
    /// hipRTC.
    pub fn flag(self) -> &'static str {
        match self {
            Self::Cxx03 => "-std=c++03",
            Self::Cxx11 => "-std=c++11",
            Self::Cxx14 => "-std=c++14",
            Self::Cxx17 => "-std=c++17",
            Self::Cxx20 => "-std=c++20",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_standard_has_its_own_flag() {
        let flags: Vec<&str> = CxxStandard::ALL
            .iter()
            .map(|standard| standard.flag())
            .collect();
        assert_eq!(
            flags,
            [
                "-std=c++03",
                "-std=c++11",
                "-std=c++14",
                "-std=c++17",
                "-std=c++20"
            ]
        );
    }
}
