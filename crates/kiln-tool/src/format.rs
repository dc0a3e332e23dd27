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
    fn one_of_a_thing_is_singular() {
        assert_eq!(count(1, "file"), "1 file");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count(3, "entry"), "3 entries");
        assert_eq!(count(1, "entry"), "1 entry");
    }
}
