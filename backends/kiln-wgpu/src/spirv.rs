//! SPIR-V kernels: the module's bytes as the text their key and sharing
//! are made of, and naga's SPIR-V front end, with the options wgpu reads
//! SPIR-V with, so the module kiln validates is the one the device builds.
//!
//! The lowered text of a SPIR-V kernel is its bytes in hexadecimal, 32 a
//! line: every byte is in the key (P1) and two kernels of the same module
//! and pipeline share one artifact, as two WGSL kernels of the same text do.

use std::fmt::Write as _;

use kiln_engine::CompileFailure;

/// Bytes per line of the hexadecimal text.
const LINE: usize = 32;

/// The SPIR-V magic number, as the first word of a little-endian module.
const MAGIC: u32 = 0x0723_0203;

/// `bytes` in hexadecimal, appended to `text`.
pub(crate) fn hex_into(bytes: &[u8], text: &mut String) {
    text.reserve(bytes.len() * 2 + bytes.len() / LINE + 1);
    for line in bytes.chunks(LINE) {
        for byte in line {
            let _ = write!(text, "{byte:02x}");
        }
        text.push('\n');
    }
}

/// The bytes of a text [`hex_into`] wrote; `None` when it is not one.
pub(crate) fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text.bytes().filter(|byte| *byte != b'\n').collect();
    if !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let high = char::from(pair[0]).to_digit(16)?;
            let low = char::from(pair[1]).to_digit(16)?;
            u8::try_from(high * 16 + low).ok()
        })
        .collect()
}

/// The module's words, as wgpu takes them.
pub(crate) fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|word| u32::from_le_bytes([word[0], word[1], word[2], word[3]]))
        .collect()
}

/// Reads a SPIR-V module with naga's front end, as wgpu does: no
/// coordinate flip, only the capabilities naga knows.
///
/// # Errors
///
/// Bytes that are not a little-endian SPIR-V module, or naga's refusal,
/// naming `label` and the entry point asked for, if one was.
pub(crate) fn parse(
    bytes: &[u8],
    label: &str,
    entry: Option<&str>,
) -> Result<naga::Module, CompileFailure> {
    check_header(bytes, label, entry)?;
    let of_entry = entry.map_or_else(String::new, |entry| format!(" of entry `{entry}`"));
    let options = naga::front::spv::Options {
        adjust_coordinate_space: false,
        strict_capabilities: true,
        block_ctx_dump_prefix: None,
    };
    naga::front::spv::parse_u8_slice(bytes, &options).map_err(|error| {
        CompileFailure::message(format!(
            "{label}: naga's SPIR-V front end refused the module{of_entry}: {error}"
        ))
        .with_hint(
            "naga reads the SPIR-V that wgpu can run; spirv-val says whether the module is \
             valid SPIR-V at all",
        )
    })
}

/// Refuses bytes that are not a little-endian SPIR-V module: shorter than
/// its header, not whole words, or without the magic number.
pub(crate) fn check_header(
    bytes: &[u8],
    label: &str,
    entry: Option<&str>,
) -> Result<(), CompileFailure> {
    let of_entry = entry.map_or_else(String::new, |entry| format!(" of entry `{entry}`"));
    let refused = |why: String| {
        CompileFailure::message(format!(
            "{label}: the module{of_entry} is not SPIR-V: {why}"
        ))
    };
    if bytes.len() < 20 || !bytes.len().is_multiple_of(4) {
        return Err(refused(format!(
            "{} bytes is not a SPIR-V module (a header of 20 bytes and whole 4-byte words)",
            bytes.len()
        ))
        .with_hint("give the bytes of a .spv file as glslangValidator -V or spirv-as write it"));
    }
    if words(&bytes[..4]) != [MAGIC] {
        return Err(
            refused("it does not start with SPIR-V's magic number".to_owned()).with_hint(
                "give the bytes of a .spv file as glslangValidator -V or spirv-as write it \
                 (little-endian words)",
            ),
        );
    }
    Ok(())
}

/// The names of a SPIR-V module's `GLCompute` entry points, in the
/// module's order: every one can be a kernel of its own (B6), made with
/// [`WgslKernelBuilder::spirv`](crate::WgslKernelBuilder::spirv) from the
/// same bytes.
///
/// Read from the module's `OpEntryPoint` instructions alone, without
/// naga: a module naga's front end cannot read still lists its entries
/// (and fails, or passes, when it compiles), and no module, however
/// malformed, does more here than end the listing with an error.
///
/// ```
/// # let spirv: Vec<u8> = Vec::new();
/// // `spirv`: a .spv file's bytes.
/// match kiln_wgpu::spirv_compute_entries(&spirv) {
///     Ok(entries) => println!("kernels: {}", entries.join(", ")),
///     Err(failure) => println!("not a SPIR-V module: {failure}"),
/// }
/// ```
///
/// # Errors
///
/// The bytes are not a SPIR-V module: too short, no magic number, or an
/// instruction that runs past the end.
pub fn spirv_compute_entries(bytes: &[u8]) -> Result<Vec<String>, CompileFailure> {
    check_header(bytes, "SPIR-V", None)?;
    let words = words(bytes);
    let mut entries = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let opcode = words[at] & 0xffff;
        let Some(instruction) = words.get(at..at + count).filter(|_| count > 0) else {
            return Err(CompileFailure::message(format!(
                "SPIR-V: the instruction at word {at} (opcode {opcode}) has {count} words, \
                 which {} words cannot hold",
                words.len() - at
            ))
            .with_hint("spirv-val says what is wrong with the module"));
        };
        if opcode == OP_ENTRY_POINT && instruction.get(1) == Some(&GL_COMPUTE) {
            entries.push(literal_string(instruction.get(3..).unwrap_or_default()));
        }
        at += count;
    }
    Ok(entries)
}

/// `OpEntryPoint`'s opcode.
const OP_ENTRY_POINT: u32 = 15;

/// The `GLCompute` execution model.
const GL_COMPUTE: u32 = 5;

/// A SPIR-V literal string: UTF-8 bytes in words, up to the first zero.
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|word| word.to_le_bytes())
        .take_while(|byte| *byte != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_every_byte() {
        let bytes: Vec<u8> = (0..=255).chain(0..70).collect();
        let mut text = String::new();
        hex_into(&bytes, &mut text);
        assert_eq!(text.lines().count(), bytes.len().div_ceil(LINE));
        assert_eq!(from_hex(&text), Some(bytes));
        assert_eq!(from_hex("0g"), None);
        assert_eq!(from_hex("012"), None);
    }

    // B6: a module naga refuses fails with naga's reason and the entry.
    #[test]
    fn bytes_that_are_no_module_are_refused_naming_the_entry() {
        let failure = parse(&[1, 2, 3, 4, 5], "bad.spv", Some("main")).expect_err("five bytes");
        let message = failure.to_string();
        assert!(
            message.contains("bad.spv") && message.contains("`main`"),
            "{message}"
        );
        let failure = parse(&[0; 40], "zeros.spv", None).expect_err("no magic number");
        assert!(failure.to_string().contains("magic"), "{failure}");
    }
}
