//! Built-in stand-ins for the C and C++ standard headers a device file
//! includes (B8).
//!
//! NVRTC and hipRTC compile device code only, and neither can open
//! `<cstdint>` or `<cassert>` by itself: a kernel written for nvcc, which
//! hands such includes to the host's library, fails on them. kiln answers
//! each such include with a stand-in of its own, handed over in memory and
//! keyed like any header (P13): on NVRTC, CUDA's own libcu++
//! (`<cuda/std/cstdint>`, in the toolkit's headers) where the toolkit has
//! it; otherwise a minimal text of what device code uses (the fixed-width
//! integers, the limits' macros, `printf`, `assert`, `min` and `max`, the
//! common type traits, `move` and `forward`). A folder that holds a header
//! of the same name wins, and a kernel can turn the stand-ins off.
//!
//! A header that only a host program can use (`<iostream>`,
//! `<cublas_v2.h>`, `<torch/...>`) is no standard header for a device
//! compile: including it is an error that says what it is and how to leave
//! it out of the device compile.

use std::path::{Path, PathBuf};

/// The run-time compiler a stand-in is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compiler {
    /// NVRTC: libcu++ where the toolkit's headers have it.
    Nvrtc,
    /// hipRTC, whose built-in header already declares a few of `std`'s
    /// names (the 32- and 64-bit integers, `size_t`, some type traits).
    Hiprtc,
}

impl Compiler {
    /// The macro its compiles define, for leaving host code out.
    pub fn macro_name(self) -> &'static str {
        match self {
            Self::Nvrtc => "__CUDACC_RTC__",
            Self::Hiprtc => "__HIPCC_RTC__",
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nvrtc => "NVRTC",
            Self::Hiprtc => "hipRTC",
        }
    }
}

/// What kiln knows of an include name no folder holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// A standard header kiln has a stand-in for: its C++ name
    /// (`cstdint` for `<stdint.h>` too).
    Standard(&'static str),
    /// A header only host code can use: what it is.
    HostOnly(&'static str),
}

/// The C++ standard headers kiln may stand in for, with their C names.
const STANDARD: [(&str, &[&str]); 17] = [
    ("cstdint", &["stdint.h"]),
    ("climits", &["limits.h"]),
    ("cfloat", &["float.h"]),
    ("cmath", &["math.h"]),
    ("cstddef", &["stddef.h"]),
    ("cstdio", &["stdio.h"]),
    ("cassert", &["assert.h"]),
    ("cstdlib", &["stdlib.h"]),
    ("cstring", &["string.h"]),
    ("algorithm", &[]),
    ("type_traits", &[]),
    ("utility", &[]),
    ("limits", &[]),
    ("array", &[]),
    ("tuple", &[]),
    ("functional", &[]),
    ("numeric", &[]),
];

/// Host-only headers, by name or by folder (`torch/`), and what they are.
const HOST_ONLY: [(&str, &str); 30] = [
    ("iostream", "C++ streams"),
    ("ostream", "C++ streams"),
    ("istream", "C++ streams"),
    ("fstream", "C++ file streams"),
    ("sstream", "C++ string streams"),
    ("iomanip", "C++ stream formatting"),
    ("string", "std::string, a host container"),
    ("vector", "std::vector, a host container"),
    ("map", "std::map, a host container"),
    ("unordered_map", "std::unordered_map, a host container"),
    ("set", "std::set, a host container"),
    ("list", "std::list, a host container"),
    ("deque", "std::deque, a host container"),
    ("thread", "host threads"),
    ("mutex", "host threads' locks"),
    ("filesystem", "the host's file system"),
    ("cuda_runtime_api.h", "the CUDA runtime's host API"),
    ("cublas_v2.h", "cuBLAS's host API"),
    ("cublas.h", "cuBLAS's host API"),
    ("cublasLt.h", "cuBLASLt's host API"),
    ("cufft.h", "cuFFT's host API"),
    (
        "curand.h",
        "cuRAND's host API (device code uses <curand_kernel.h>)",
    ),
    ("cusparse.h", "cuSPARSE's host API"),
    ("cudnn.h", "cuDNN's host API"),
    ("nccl.h", "NCCL's host API"),
    ("torch/", "PyTorch's C++ API, host code"),
    ("ATen/", "PyTorch's ATen, host code"),
    ("c10/", "PyTorch's c10, host code"),
    ("pybind11/", "pybind11, host code"),
    ("rocblas/", "rocBLAS's host API"),
];

/// What kiln knows of `name`, an include no folder holds.
pub fn classify(name: &str) -> Option<Known> {
    for (canonical, c_names) in STANDARD {
        if name == canonical || c_names.contains(&name) {
            return Some(Known::Standard(canonical));
        }
    }
    HOST_ONLY
        .iter()
        .find(|(host, _)| {
            if host.ends_with('/') {
                name.starts_with(host)
            } else {
                name == *host
            }
        })
        .map(|(_, what)| Known::HostOnly(what))
}

/// Why the host-only header `name` (`what` it is) cannot be compiled by
/// `compiler`, and how to leave it out.
pub fn host_only_message(name: &str, what: &str, compiler: Compiler) -> String {
    format!(
        "`{name}` is a host-only header ({what}): a device compile by {} cannot use it; leave \
         it out of the device compile (`#ifndef {}` ... `#endif` around the include), or move \
         the host code to a host file",
        compiler.name(),
        compiler.macro_name()
    )
}

/// The stand-in for the standard header `canonical` (a name
/// [`classify`] gave) on `compiler`: CUDA's libcu++ when one of `toolkit`
/// holds its `cuda/std/` header, else kiln's minimal text; `None` when kiln
/// has neither.
pub fn stand_in(canonical: &str, compiler: Compiler, toolkit: &[PathBuf]) -> Option<String> {
    let banner = format!(
        "// kiln's built-in stand-in for <{canonical}> on {}: a device compile has no host \
         library (`// kiln stdlib: off` turns it off)\n#pragma once\n",
        compiler.name()
    );
    if compiler == Compiler::Nvrtc
        && let Some(includes) = libcu(canonical, toolkit)
    {
        let mut text = banner;
        for include in includes {
            text.push_str(&format!("#include <{include}>\n"));
        }
        text.push_str("namespace std { using namespace cuda::std; }\n");
        return Some(text);
    }
    let body = minimal(canonical, compiler)?;
    Some(banner + &body)
}

/// The libcu++ headers that stand for `canonical`, when a folder of
/// `toolkit` holds them all.
fn libcu(canonical: &str, toolkit: &[PathBuf]) -> Option<Vec<String>> {
    let wanted: Vec<String> = match canonical {
        "algorithm" => vec![
            "cuda/std/__algorithm/min.h".to_owned(),
            "cuda/std/__algorithm/max.h".to_owned(),
        ],
        // libcu++ leaves these to the host's headers, or defines nothing,
        // under NVRTC.
        "cstdio" | "cfloat" | "cassert" => return None,
        other => vec![format!("cuda/std/{other}")],
    };
    let held = |include: &String| toolkit.iter().any(|folder| is_file(folder, include));
    wanted.iter().all(held).then_some(wanted)
}

fn is_file(folder: &Path, name: &str) -> bool {
    folder.join(name).is_file()
}

/// The math functions `<cmath>`'s stand-in brings into `std`.
const MATH: [&str; 46] = [
    "fabs",
    "sqrt",
    "cbrt",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "pow",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "floor",
    "ceil",
    "round",
    "trunc",
    "rint",
    "fmod",
    "remainder",
    "fmin",
    "fmax",
    "fma",
    "hypot",
    "erf",
    "erfc",
    "tgamma",
    "lgamma",
    "ldexp",
    "frexp",
    "modf",
    "copysign",
    "isnan",
    "isinf",
    "isfinite",
];

/// kiln's minimal text for `canonical` on `compiler`.
fn minimal(canonical: &str, compiler: Compiler) -> Option<String> {
    let hip = compiler == Compiler::Hiprtc;
    let text = match canonical {
        "cstdint" => {
            let mut text = String::from(
                "typedef signed char int8_t;\ntypedef short int16_t;\ntypedef int int32_t;\n\
                 typedef long long int64_t;\ntypedef unsigned char uint8_t;\n\
                 typedef unsigned short uint16_t;\ntypedef unsigned int uint32_t;\n\
                 typedef unsigned long long uint64_t;\ntypedef long long intptr_t;\n\
                 typedef unsigned long long uintptr_t;\ntypedef long long intmax_t;\n\
                 typedef unsigned long long uintmax_t;\n#include <climits>\n\
                 #define INT8_MIN (-128)\n#define INT16_MIN (-32767-1)\n\
                 #define INT32_MIN (-2147483647-1)\n#define INT64_MIN (-9223372036854775807LL-1)\n\
                 #define INT8_MAX 127\n#define INT16_MAX 32767\n#define INT32_MAX 2147483647\n\
                 #define INT64_MAX 9223372036854775807LL\n#define UINT8_MAX 255\n\
                 #define UINT16_MAX 65535\n#define UINT32_MAX 4294967295U\n\
                 #define UINT64_MAX 18446744073709551615ULL\n#define SIZE_MAX UINT64_MAX\n\
                 namespace std {\n",
            );
            // hipRTC's built-in header declares these four in std itself.
            let declared = ["int32_t", "int64_t", "uint32_t", "uint64_t"];
            for name in [
                "int8_t",
                "int16_t",
                "int32_t",
                "int64_t",
                "uint8_t",
                "uint16_t",
                "uint32_t",
                "uint64_t",
                "intptr_t",
                "uintptr_t",
                "intmax_t",
                "uintmax_t",
            ] {
                if !(hip && declared.contains(&name)) {
                    text.push_str(&format!("typedef ::{name} {name};\n"));
                }
            }
            text.push_str("}\n");
            text
        }
        "climits" => guarded(&[
            ("CHAR_BIT", "8"),
            ("SCHAR_MIN", "(-128)"),
            ("SCHAR_MAX", "127"),
            ("UCHAR_MAX", "255"),
            ("CHAR_MIN", "(-128)"),
            ("CHAR_MAX", "127"),
            ("SHRT_MIN", "(-32767-1)"),
            ("SHRT_MAX", "32767"),
            ("USHRT_MAX", "65535"),
            ("INT_MIN", "(-2147483647-1)"),
            ("INT_MAX", "2147483647"),
            ("UINT_MAX", "4294967295U"),
            ("LONG_MIN", "(-9223372036854775807L-1)"),
            ("LONG_MAX", "9223372036854775807L"),
            ("ULONG_MAX", "18446744073709551615UL"),
            ("LLONG_MIN", "(-9223372036854775807LL-1)"),
            ("LLONG_MAX", "9223372036854775807LL"),
            ("ULLONG_MAX", "18446744073709551615ULL"),
        ]),
        "cfloat" => guarded(&[
            ("FLT_RADIX", "2"),
            ("FLT_MANT_DIG", "24"),
            ("DBL_MANT_DIG", "53"),
            ("FLT_DIG", "6"),
            ("DBL_DIG", "15"),
            ("FLT_MIN", "1.17549435e-38F"),
            ("FLT_MAX", "3.40282347e+38F"),
            ("FLT_EPSILON", "1.19209290e-07F"),
            ("DBL_MIN", "2.2250738585072014e-308"),
            ("DBL_MAX", "1.7976931348623157e+308"),
            ("DBL_EPSILON", "2.2204460492503131e-16"),
        ]),
        // Both compilers declare the math functions and their overloads
        // for device code, outside `std`.
        "cmath" => {
            let mut text = String::from("namespace std {\n");
            for function in MATH {
                text.push_str(&format!("using ::{function};\n"));
            }
            text.push_str("}\n");
            text
        }
        "cstdlib" | "cstring" => {
            "// the compiler's own declarations serve device code\n".to_owned()
        }
        "cstddef" => {
            let mut text = String::from(
                "typedef decltype((char*)0 - (char*)0) ptrdiff_t;\nnamespace std {\n\
                 typedef ::ptrdiff_t ptrdiff_t;\ntypedef decltype(nullptr) nullptr_t;\n",
            );
            if !hip {
                text.push_str("typedef decltype(sizeof(0)) size_t;\n");
            }
            text.push_str("}\n");
            text
        }
        "cstdio" => {
            "// device printf is the compiler's own\nnamespace std { using ::printf; }\n".to_owned()
        }
        "cassert" => format!(
            "#ifndef assert\n#ifdef NDEBUG\n#define assert(condition) ((void)0)\n#else\n\
             #define assert(condition) ((condition) ? (void)0 : {}())\n#endif\n#endif\n",
            if hip { "__builtin_trap" } else { "__trap" }
        ),
        "algorithm" => "namespace std {\ntemplate <class T> __host__ __device__ constexpr const \
                        T& min(const T& a, const T& b) { return b < a ? b : a; }\n\
                        template <class T> __host__ __device__ constexpr const T& max(const T& \
                        a, const T& b) { return a < b ? b : a; }\n}\n"
            .to_owned(),
        "type_traits" => type_traits(hip),
        "utility" => "#include <type_traits>\nnamespace std {\ntemplate <class T> __host__ \
                      __device__ constexpr typename remove_reference<T>::type&& move(T&& value) \
                      noexcept { return static_cast<typename remove_reference<T>::type&&>(value); \
                      }\ntemplate <class T> __host__ __device__ constexpr T&& forward(typename \
                      remove_reference<T>::type& value) noexcept { return static_cast<T&&>(value); \
                      }\ntemplate <class T> __host__ __device__ constexpr T&& forward(typename \
                      remove_reference<T>::type&& value) noexcept { return \
                      static_cast<T&&>(value); }\ntemplate <class T> __host__ __device__ void \
                      swap(T& a, T& b) { T kept = static_cast<T&&>(a); a = \
                      static_cast<T&&>(b); b = static_cast<T&&>(kept); }\n}\n"
            .to_owned(),
        _ => return None,
    };
    Some(text)
}

/// `#define NAME VALUE` for each pair, each under `#ifndef NAME`.
fn guarded(macros: &[(&str, &str)]) -> String {
    macros
        .iter()
        .map(|(name, value)| format!("#ifndef {name}\n#define {name} {value}\n#endif\n"))
        .collect()
}

/// The type traits device code uses most; on hipRTC, those its built-in
/// header lacks.
fn type_traits(hip: bool) -> String {
    let mut text = String::from("namespace std {\n");
    if !hip {
        text.push_str(
            "template <class T, T v> struct integral_constant { static constexpr T value = v; \
             typedef T value_type; typedef integral_constant type; constexpr operator T() const \
             { return v; } };\ntypedef integral_constant<bool, true> true_type;\n\
             typedef integral_constant<bool, false> false_type;\n\
             template <bool B, class T = void> struct enable_if {};\n\
             template <class T> struct enable_if<true, T> { typedef T type; };\n\
             template <class T, class U> struct is_same : false_type {};\n\
             template <class T> struct is_same<T, T> : true_type {};\n\
             template <class T> struct is_integral : integral_constant<bool, \
             __is_integral(T)> {};\n\
             template <class T> struct is_floating_point : integral_constant<bool, \
             __is_floating_point(T)> {};\n\
             template <class T> struct is_arithmetic : integral_constant<bool, \
             __is_arithmetic(T)> {};\n\
             template <class T> struct is_signed : integral_constant<bool, __is_signed(T)> \
             {};\n",
        );
    }
    text.push_str(
        "template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;\n\
         template <bool B, class T, class F> struct conditional { typedef T type; };\n\
         template <class T, class F> struct conditional<false, T, F> { typedef F type; };\n\
         template <bool B, class T, class F> using conditional_t = typename conditional<B, T, \
         F>::type;\n\
         template <class T> struct remove_reference { typedef T type; };\n\
         template <class T> struct remove_reference<T&> { typedef T type; };\n\
         template <class T> struct remove_reference<T&&> { typedef T type; };\n\
         template <class T> using remove_reference_t = typename remove_reference<T>::type;\n\
         template <class T> struct remove_const { typedef T type; };\n\
         template <class T> struct remove_const<const T> { typedef T type; };\n\
         template <class T> struct remove_volatile { typedef T type; };\n\
         template <class T> struct remove_volatile<volatile T> { typedef T type; };\n\
         template <class T> struct remove_cv { typedef typename remove_volatile<typename \
         remove_const<T>::type>::type type; };\n\
         template <class T> using remove_cv_t = typename remove_cv<T>::type;\n\
         template <class T> struct is_pointer : integral_constant<bool, false> {};\n\
         template <class T> struct is_pointer<T*> : integral_constant<bool, true> {};\n\
         template <class T> struct is_void : is_same<typename remove_cv<T>::type, void> {};\n\
         template <class T, class U> constexpr bool is_same_v = is_same<T, U>::value;\n\
         }\n",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    // B8
    #[test]
    fn standard_and_host_only_headers_are_told_apart() {
        assert_eq!(classify("cstdint"), Some(Known::Standard("cstdint")));
        assert_eq!(classify("stdint.h"), Some(Known::Standard("cstdint")));
        assert!(matches!(classify("iostream"), Some(Known::HostOnly(_))));
        assert!(matches!(
            classify("torch/extension.h"),
            Some(Known::HostOnly(_))
        ));
        assert_eq!(classify("tiles.h"), None);
        let message = host_only_message("cublas_v2.h", "cuBLAS's host API", Compiler::Hiprtc);
        assert!(message.contains("#ifndef __HIPCC_RTC__"), "{message}");
        assert!(!message.contains("include folder"), "{message}");
    }

    // B8
    #[test]
    fn a_stand_in_is_libcu_where_the_toolkit_has_it_else_minimal() {
        let root = std::env::temp_dir().join(format!("kiln-cxx-stdlib-{}", std::process::id()));
        std::fs::create_dir_all(root.join("cuda/std")).expect("a folder");
        std::fs::write(root.join("cuda/std/cstdint"), "").expect("a header");
        let toolkit = [root.clone()];
        let cuda = stand_in("cstdint", Compiler::Nvrtc, &toolkit).expect("libcu++");
        assert!(cuda.contains("#include <cuda/std/cstdint>"), "{cuda}");
        let hip = stand_in("cstdint", Compiler::Hiprtc, &toolkit).expect("minimal");
        assert!(hip.contains("typedef signed char int8_t;"), "{hip}");
        assert!(!hip.contains("typedef ::int32_t"), "{hip}");
        let plain = stand_in("climits", Compiler::Nvrtc, &toolkit).expect("minimal");
        assert!(plain.contains("#define INT_MAX 2147483647"), "{plain}");
        assert_eq!(stand_in("limits", Compiler::Hiprtc, &toolkit), None);
        let _ = std::fs::remove_dir_all(root);
    }
}
