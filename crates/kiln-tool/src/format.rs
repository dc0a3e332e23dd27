//! Numbers and times as people read them.

use std::time::{SystemTime, UNIX_EPOCH};

/// `1536` → `1.5 KiB`.
pub fn bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A size as the command line and `KILN_CACHE_*` take it (`512M`, `10G`,
/// `1.5GiB`), read as the store reads its own settings.
///
/// # Errors
///
/// What a size looks like, for a text that is none.
pub fn parse_size(text: &str) -> Result<u64, String> {
    kiln_store::parse_size(text).ok_or_else(|| {
        "not a size: write bytes with an optional suffix, like 512M, 10G or 1.5GiB".into()
    })
}

/// A whole number of things, spaces around it allowed (as a variable may
/// hold it).
///
/// # Errors
///
/// That it is no whole number.
pub fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| "not a whole number".to_owned())
}

/// `1, "file"` → `1 file`, `2, "file"` → `2 files`; `"entry"` makes
/// `entries`.
pub fn count(count: u64, noun: &str) -> String {
    if count == 1 {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) => format!("{count} {stem}ies"),
        None => format!("{count} {noun}s"),
    }
}

/// `0.0123` → `12 ms`, `75.5` → `75.50 s`.
pub fn seconds(value: f64) -> String {
    if value < 1.0 {
        format!("{:.0} ms", value * 1e3)
    } else {
        format!("{value:.2} s")
    }
}

/// Seconds since the Unix epoch → `3m ago`, `2d ago`.
pub fn ago(seconds: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let age = now.saturating_sub(seconds);
    match age {
        0..60 => format!("{age}s ago"),
        60..3600 => format!("{}m ago", age / 60),
        3600..86_400 => format!("{}h ago", age / 3600),
        _ => format!("{}d ago", age / 86_400),
    }
}

/// A compiler's name and version as a table shows it (`nvrtc 13.0`,
/// `naga 30.0.2`): without what is in parentheses or brackets (a
/// library's path and digest, a device number), the other versions or the
/// artifact format, unless `wide`. An adapter's long name is cut short the
/// same way.
pub fn compiler(compiler: &str, wide: bool) -> String {
    if wide {
        return compiler.to_owned();
    }
    // The first part names the compiler (`naga 30.0.2 / wgpu 30.0.2 /
    // artifact 2` is naga's).
    let first = compiler.split(" / ").next().unwrap_or(compiler);
    let mut kept = String::new();
    let mut depth = 0_usize;
    for character in first.chars() {
        match character {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => kept.push(character),
            _ => {}
        }
    }
    let short = kept.split_whitespace().collect::<Vec<_>>().join(" ");
    if short.is_empty() {
        compiler.to_owned()
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(10 << 30), "10.0 GiB");
    }

    #[test]
    fn a_compiler_shows_its_name_and_version_unless_wide() {
        let nvrtc = "nvrtc 13.0 (libnvrtc.so.13 blake3:49d1e58c2c695ed2) / artifact 3";
        assert_eq!(compiler(nvrtc, false), "nvrtc 13.0");
        assert_eq!(compiler(nvrtc, true), nvrtc);
        assert_eq!(
            compiler("naga 30.0.2 / wgpu 30.0.2 / artifact 3", false),
            "naga 30.0.2"
        );
        assert_eq!(
            compiler(
                "llvmpipe (LLVM 15.0.6, 256 bits) [10005:0000] Vulkan",
                false
            ),
            "llvmpipe Vulkan"
        );
        assert_eq!(
            compiler("(all in parentheses)", false),
            "(all in parentheses)"
        );
    }

    #[test]
    fn one_of_a_thing_is_singular() {
        assert_eq!(count(1, "file"), "1 file");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count(3, "entry"), "3 entries");
        assert_eq!(count(1, "entry"), "1 entry");
    }
}
