//! A CUDA kernel's resource use (D4), read from what the compile printed:
//! ptxas's verbose report, which NVRTC returns in its log when it is given
//! `--ptxas-options=-v`, and the PTX's `.maxntid` / `.reqntid` directive,
//! which `__launch_bounds__` writes.
//!
//! ptxas reports each entry function as
//!
//! ```text
//! ptxas info    : Compiling entry function 'scale' for 'sm_80'
//! ptxas info    : Function properties for scale
//! ptxas         .     648 bytes stack frame, 1756 bytes spill stores, 1796 bytes spill loads
//! ptxas info    : Used 24 registers, used 1 barriers, 1024 bytes smem, 364 bytes cmem[0]
//! ```
//!
//! and device functions that are not inlined with their own "Function
//! properties" lines; only the entry point's are read. The report holds
//! figures only, never the log's lines (which carry the compile's time),
//! so the same compile gives the same report. A line this reader does not
//! know is left alone: a figure it cannot find is `None`.

use kiln_engine::ResourceUsage;

/// The option that makes ptxas print its report into NVRTC's log.
pub(crate) const VERBOSE_PTXAS: &str = "--ptxas-options=-v";

/// The resources of the entry function `symbol` (its lowered, possibly
/// mangled name) as ptxas's report in `log` and the `ptx` give them.
pub(crate) fn read(log: &str, ptx: &str, symbol: &str) -> ResourceUsage {
    let mut usage = ResourceUsage::default();
    // Which entry function ptxas compiles, and whose properties it prints.
    let mut compiling: Option<&str> = None;
    let mut properties_of: Option<&str> = None;
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("ptxas") else {
            continue;
        };
        let text = rest
            .trim_start()
            .trim_start_matches("info")
            .trim_start()
            .trim_start_matches([':', '.'])
            .trim();
        if let Some(name) = text.strip_prefix("Compiling entry function '") {
            compiling = name.split('\'').next();
            properties_of = None;
        } else if let Some(name) = text.strip_prefix("Function properties for ") {
            properties_of = Some(name.trim());
        } else if text.contains("bytes stack frame") {
            if properties_of == Some(symbol) {
                for (value, what) in figures(text) {
                    match what {
                        "bytes stack frame" => usage.local_memory_bytes = Some(value),
                        "bytes spill stores" => usage.spill_store_bytes = Some(value),
                        "bytes spill loads" => usage.spill_load_bytes = Some(value),
                        _ => {}
                    }
                }
            }
        } else if text.starts_with("Used ") && compiling == Some(symbol) {
            for (value, what) in figures(text.trim_start_matches("Used ")) {
                match what {
                    "registers" => usage.registers = u32::try_from(value).ok(),
                    "bytes smem" => usage.shared_memory_bytes = Some(value),
                    "bytes cmem[0]" => usage.constant_memory_bytes = Some(value),
                    _ => {}
                }
            }
        }
    }
    usage.max_threads_per_block = launch_bound(ptx, symbol);
    usage
}

/// Fills what `usage` lacks from the cubin itself, for an NVRTC whose log
/// held no ptxas report (NVIDIA's compute cache hands NVRTC the cubin of a
/// text it compiled before without running ptxas): the entry function's
/// registers and stack frame, from the `.nv.info` section's register-count
/// and frame-size attributes of the function's symbol (the `sh_info` of
/// its `.text.<symbol>` section). Spills, shared and constant memory are
/// not read from the cubin: they stay unknown. A cubin that is not a
/// well-formed 64-bit little-endian ELF changes nothing.
pub(crate) fn fill_from_cubin(usage: &mut ResourceUsage, cubin: &[u8], symbol: &str) {
    /// `EIATTR_REGCOUNT` and `EIATTR_FRAME_SIZE`: (symbol, value) pairs.
    const REGISTER_COUNT: u8 = 0x2f;
    const FRAME_SIZE: u8 = 0x11;
    let Some(sections) = sections(cubin) else {
        return;
    };
    let Some(text) = sections
        .iter()
        .find(|section| section.name.strip_prefix(".text.") == Some(symbol))
    else {
        return;
    };
    let Some(info) = sections.iter().find(|section| section.name == ".nv.info") else {
        return;
    };
    for (attribute, value) in symbol_attributes(info.data) {
        if value.0 != text.info {
            continue;
        }
        match attribute {
            REGISTER_COUNT if usage.registers.is_none() => usage.registers = Some(value.1),
            FRAME_SIZE if usage.local_memory_bytes.is_none() => {
                usage.local_memory_bytes = Some(u64::from(value.1));
            }
            _ => {}
        }
    }
}

/// The `(attribute, (symbol, value))` entries of a `.nv.info` section
/// whose value is two 32-bit words; the rest is stepped over. Stops at the
/// first entry that runs past the end.
fn symbol_attributes(data: &[u8]) -> Vec<(u8, (u32, u32))> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 4 <= data.len() {
        let (format, attribute) = (data[at], data[at + 1]);
        if format != 4 {
            // A value of two bytes, or none: four bytes in all.
            at += 4;
            continue;
        }
        let size = usize::from(u16::from_le_bytes([data[at + 2], data[at + 3]]));
        let Some(value) = data.get(at + 4..at + 4 + size) else {
            break;
        };
        if let [a, b, c, d, e, f, g, h] = *value {
            found.push((
                attribute,
                (
                    u32::from_le_bytes([a, b, c, d]),
                    u32::from_le_bytes([e, f, g, h]),
                ),
            ));
        }
        at += 4 + size;
    }
    found
}

/// What the cubin says of the entry function `symbol`'s resources (D4),
/// without a compile log: its registers and stack frame, from the
/// `.nv.info` section's attributes of the function's symbol. Spills, shared and constant
/// memory are not read from it. Nothing for bytes that are not a cubin with that
/// entry.
pub fn cubin_resources(cubin: &[u8], symbol: &str) -> ResourceUsage {
    let mut usage = ResourceUsage::default();
    fill_from_cubin(&mut usage, cubin, symbol);
    usage
}

/// A section of a cubin: its name, bytes (none for one that takes no room
/// in the file) and `sh_info`.
struct Section<'a> {
    name: &'a str,
    data: &'a [u8],
    info: u32,
}

/// The sections of a 64-bit little-endian ELF image; `None` when `bytes`
/// is not one or a header points outside it. Never panics.
fn sections(bytes: &[u8]) -> Option<Vec<Section<'_>>> {
    const HEADER: usize = 64;
    const ENTRY: usize = 64;
    if bytes.len() < HEADER || bytes[..4] != *b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return None;
    }
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
    };
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let u64_at = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let table = usize::try_from(u64_at(0x28)?).ok()?;
    let count = usize::from(u16_at(0x3c)?);
    let names_index = usize::from(u16_at(0x3e)?);
    if usize::from(u16_at(0x3a)?) != ENTRY || count > 65_535 {
        return None;
    }
    let entry = |index: usize| -> Option<usize> {
        let at = table.checked_add(index.checked_mul(ENTRY)?)?;
        (at.checked_add(ENTRY)? <= bytes.len()).then_some(at)
    };
    let names_at = entry(names_index)?;
    let names_offset = usize::try_from(u64_at(names_at + 0x18)?).ok()?;
    let names_size = usize::try_from(u64_at(names_at + 0x20)?).ok()?;
    let names = bytes.get(names_offset..names_offset.checked_add(names_size)?)?;
    (0..count)
        .map(|index| {
            let at = entry(index)?;
            let name_at = usize::try_from(u32_at(at)?).ok()?;
            let name = names.get(name_at..)?;
            let name = &name[..name.iter().position(|&byte| byte == 0)?];
            // SHT_NOBITS (8) takes no room in the file.
            let data = if u32_at(at + 4)? == 8 {
                &[][..]
            } else {
                let offset = usize::try_from(u64_at(at + 0x18)?).ok()?;
                let size = usize::try_from(u64_at(at + 0x20)?).ok()?;
                bytes.get(offset..offset.checked_add(size)?)?
            };
            Some(Section {
                name: std::str::from_utf8(name).ok()?,
                data,
                info: u32_at(at + 0x2c)?,
            })
        })
        .collect()
}

/// The `N what` pairs of a comma-separated list (`24 registers, used 1
/// barriers, 1024 bytes smem`), a leading verb dropped.
fn figures(text: &str) -> impl Iterator<Item = (u64, &str)> {
    text.split(',').filter_map(|part| {
        let part = part.trim().trim_start_matches("used ").trim();
        let (number, what) = part.split_once(' ')?;
        Some((number.parse().ok()?, what.trim()))
    })
}

/// The most threads a block of the entry `symbol` may have, when its PTX
/// says (`.maxntid 128, 1, 1` or `.reqntid 64, 2, 1`, from
/// `__launch_bounds__`): the product of the dimensions it gives.
fn launch_bound(ptx: &str, symbol: &str) -> Option<u32> {
    let start = ptx.find(&format!(".entry {symbol}("))?;
    // The directives sit between the parameter list and the body's brace.
    let header = &ptx[start..];
    let header = &header[..header.find('{').unwrap_or(header.len())];
    let directive = [".maxntid", ".reqntid"]
        .iter()
        .find_map(|name| header.find(name).map(|at| &header[at + name.len()..]))?;
    let line = directive.lines().next().unwrap_or_default();
    let mut threads: u32 = 1;
    for dimension in line.split(',') {
        let dimension: u32 = dimension.trim().parse().ok()?;
        threads = threads.checked_mul(dimension)?;
    }
    Some(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    // What NVRTC 13.0 printed for a kernel that calls a device function it
    // did not inline, built with -maxrregcount=24 for sm_80.
    const LOG: &str = "\
ptxas info    : Overriding maximum register limit 256 for 'spill' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'spill' for 'sm_80'
ptxas info    : Function properties for spill
ptxas         .     648 bytes stack frame, 1756 bytes spill stores, 1796 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 648 bytes cumulative stack size, 1024 bytes smem, 364 bytes cmem[0]
ptxas info    : Compiling entry function 'other' for 'sm_80'
ptxas info    : Function properties for other
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 380 bytes cmem[0]
ptxas info    : Compile time = 69.578 ms
";

    const PTX: &str = "\
.visible .entry other(
\t.param .u64 other_param_0
)
{
\tret;
}
.visible .entry spill(
\t.param .u64 spill_param_0,
\t.param .u32 spill_param_1
)
.maxntid 128, 2, 1
{
\tret;
}
";

    // D4
    #[test]
    fn d4_the_entry_points_figures_are_read_and_no_other_functions() {
        let usage = read(LOG, PTX, "spill");
        assert_eq!(
            usage,
            ResourceUsage {
                registers: Some(24),
                spill_store_bytes: Some(1756),
                spill_load_bytes: Some(1796),
                shared_memory_bytes: Some(1024),
                local_memory_bytes: Some(648),
                constant_memory_bytes: Some(364),
                max_threads_per_block: Some(256),
                ..ResourceUsage::default()
            }
        );
        assert!(usage.spills());
        let other = read(LOG, PTX, "other");
        assert_eq!(other.registers, Some(8));
        assert_eq!(other.constant_memory_bytes, Some(380));
        assert_eq!(other.shared_memory_bytes, None);
        assert_eq!(other.max_threads_per_block, None, "no launch bounds");
        assert!(!other.spills());
    }

    // D4
    #[test]
    fn d4_a_log_without_a_report_gives_no_figures_and_odd_text_never_panics() {
        assert_eq!(read("", "", "k"), ResourceUsage::default());
        for log in [
            "ptxas",
            "ptxas info    : Used",
            "ptxas info    : Used x registers, 99999999999999999999 bytes smem",
            "ptxas info    : Compiling entry function 'k",
            "ptxas .     bytes stack frame, , 3",
        ] {
            let log = format!("ptxas info    : Compiling entry function 'k' for 'sm_90'\n{log}");
            let usage = read(&log, ".entry k(\n.maxntid 4294967295, 2, 1\n{", "k");
            assert_eq!(usage.registers, None, "{log}");
            assert_eq!(
                usage.max_threads_per_block, None,
                "an overflow is no figure"
            );
        }
    }
}
