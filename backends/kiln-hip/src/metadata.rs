//! A HIP kernel's resource use (D4), read from its code object's metadata:
//! the `NT_AMDGPU_METADATA` note ([`code_object::metadata_note`]), a
//! MessagePack map whose `amdhsa.kernels` array describes each kernel
//! (`.vgpr_count`, `.sgpr_count`, `.vgpr_spill_count`,
//! `.sgpr_spill_count`, `.group_segment_fixed_size` (LDS),
//! `.private_segment_fixed_size` (scratch), `.max_flat_workgroup_size`).
//!
//! The MessagePack reader is small and written here rather than taken as
//! a dependency: kiln needs a dozen numbers out of one map. It reads bytes
//! that may be damaged (a store's verified bytes are still someone's
//! compiler output), so every length is checked against what is left
//! before anything is read or allocated, nesting is bounded, and malformed
//! input is an error, never a panic.

use kiln_engine::ResourceUsage;

use crate::code_object;
use crate::error::{Error, Result};

/// How deep maps and arrays may nest. The metadata nests three or four
/// levels; the bound keeps a hostile input from exhausting the stack.
const MAX_DEPTH: usize = 16;

/// The resources of the kernel whose symbol is `symbol` (its lowered
/// name) in the code object `code_object`, as its metadata gives them.
///
/// # Errors
///
/// [`Error::InvalidCodeObject`] for bytes that are not a whole code
/// object, a code object without metadata, metadata that is not valid
/// MessagePack, or metadata that does not describe `symbol`.
pub fn kernel_resources(code_object: &[u8], symbol: &str) -> Result<ResourceUsage> {
    let note = code_object::metadata_note(code_object)?
        .ok_or_else(|| invalid("it has no metadata note"))?;
    let metadata = read(note)?;
    let kernels = match metadata.get("amdhsa.kernels") {
        Some(Value::Array(kernels)) => kernels,
        _ => return Err(invalid("its metadata has no amdhsa.kernels array")),
    };
    let descriptor = format!("{symbol}.kd");
    let kernel = kernels
        .iter()
        .find(|kernel| {
            kernel.get(".symbol").and_then(Value::as_str) == Some(descriptor.as_str())
                || kernel.get(".name").and_then(Value::as_str) == Some(symbol)
        })
        .ok_or_else(|| invalid(format!("its metadata does not describe `{symbol}`")))?;
    let number = |field: &str| kernel.get(field).and_then(Value::as_u64);
    let small = |field: &str| number(field).and_then(|value| u32::try_from(value).ok());
    Ok(ResourceUsage {
        registers: small(".vgpr_count"),
        scalar_registers: small(".sgpr_count"),
        spilled_vector_registers: small(".vgpr_spill_count"),
        spilled_scalar_registers: small(".sgpr_spill_count"),
        shared_memory_bytes: number(".group_segment_fixed_size"),
        local_memory_bytes: number(".private_segment_fixed_size"),
        max_threads_per_block: small(".max_flat_workgroup_size"),
        ..ResourceUsage::default()
    })
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidCodeObject {
        reason: reason.into(),
    }
}

/// A MessagePack value, borrowing strings and bytes from the input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Nil,
    Bool(bool),
    Integer(i128),
    Float(f64),
    String(&'a str),
    Binary(&'a [u8]),
    Array(Vec<Value<'a>>),
    Map(Vec<(Value<'a>, Value<'a>)>),
    Extension(i8, &'a [u8]),
}

impl<'a> Value<'a> {
    /// The value under the string key `key` of a map.
    fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(name, _)| name.as_str() == Some(key))
                .map(|(_, value)| value),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Integer(value) => u64::try_from(*value).ok(),
            _ => None,
        }
    }
}

/// The first MessagePack value of `bytes`.
///
/// # Errors
///
/// [`Error::InvalidCodeObject`] for bytes that are not one.
pub(crate) fn read(bytes: &[u8]) -> Result<Value<'_>> {
    Decoder { bytes, at: 0 }.value(0)
}

struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn take(&mut self, length: usize) -> Result<&'a [u8]> {
        if length > self.left() {
            return Err(invalid(format!(
                "its metadata is truncated: {length} bytes wanted at byte {} of {}",
                self.at,
                self.bytes.len()
            )));
        }
        let taken = &self.bytes[self.at..self.at + length];
        self.at += length;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// A length of `width` bytes (1, 2 or 4), big-endian.
    fn length(&mut self, width: usize) -> Result<usize> {
        let value = match width {
            1 => u32::from(self.byte()?),
            2 => u32::from(u16::from_be_bytes(self.array()?)),
            _ => u32::from_be_bytes(self.array()?),
        };
        usize::try_from(value).map_err(|_| invalid("a length does not fit"))
    }

    fn string(&mut self, length: usize) -> Result<Value<'a>> {
        std::str::from_utf8(self.take(length)?)
            .map(Value::String)
            .map_err(|_| invalid("a metadata string is not UTF-8"))
    }

    fn extension(&mut self, length: usize) -> Result<Value<'a>> {
        let kind = i8::from_be_bytes(self.array()?);
        Ok(Value::Extension(kind, self.take(length)?))
    }

    /// `count` values, each at least one byte: a count past the bytes
    /// left is refused before anything is allocated for it.
    fn values(&mut self, count: usize, depth: usize) -> Result<Vec<Value<'a>>> {
        if count > self.left() {
            return Err(invalid("a metadata array is longer than its bytes"));
        }
        (0..count).map(|_| self.value(depth + 1)).collect()
    }

    fn entries(&mut self, count: usize, depth: usize) -> Result<Value<'a>> {
        if count.saturating_mul(2) > self.left() {
            return Err(invalid("a metadata map is longer than its bytes"));
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let key = self.value(depth + 1)?;
            let value = self.value(depth + 1)?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>> {
        if depth > MAX_DEPTH {
            return Err(invalid("its metadata nests too deep"));
        }
        let marker = self.byte()?;
        Ok(match marker {
            0x00..=0x7f => Value::Integer(i128::from(marker)),
            0x80..=0x8f => self.entries(usize::from(marker & 0x0f), depth)?,
            0x90..=0x9f => Value::Array(self.values(usize::from(marker & 0x0f), depth)?),
            0xa0..=0xbf => self.string(usize::from(marker & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let length = self.length(1 << (marker - 0xc4))?;
                Value::Binary(self.take(length)?)
            }
            0xc7..=0xc9 => {
                let length = self.length(1 << (marker - 0xc7))?;
                self.extension(length)?
            }
            0xca => Value::Float(f64::from(f32::from_be_bytes(self.array()?))),
            0xcb => Value::Float(f64::from_be_bytes(self.array()?)),
            0xcc => Value::Integer(i128::from(self.byte()?)),
            0xcd => Value::Integer(i128::from(u16::from_be_bytes(self.array()?))),
            0xce => Value::Integer(i128::from(u32::from_be_bytes(self.array()?))),
            0xcf => Value::Integer(i128::from(u64::from_be_bytes(self.array()?))),
            0xd0 => Value::Integer(i128::from(i8::from_be_bytes(self.array()?))),
            0xd1 => Value::Integer(i128::from(i16::from_be_bytes(self.array()?))),
            0xd2 => Value::Integer(i128::from(i32::from_be_bytes(self.array()?))),
            0xd3 => Value::Integer(i128::from(i64::from_be_bytes(self.array()?))),
            0xd4..=0xd8 => self.extension(1 << (marker - 0xd4))?,
            0xd9..=0xdb => {
                let length = self.length(1 << (marker - 0xd9))?;
                self.string(length)?
            }
            0xdc | 0xdd => {
                let count = self.length(if marker == 0xdc { 2 } else { 4 })?;
                Value::Array(self.values(count, depth)?)
            }
            0xde | 0xdf => {
                let count = self.length(if marker == 0xde { 2 } else { 4 })?;
                self.entries(count, depth)?
            }
            0xe0..=0xff => Value::Integer(i128::from(marker as i8)),
            0xc1 => return Err(invalid("its metadata holds the reserved byte 0xc1")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MessagePack string.
    fn text(value: &str) -> Vec<u8> {
        let mut bytes = vec![0xd9, u8::try_from(value.len()).expect("short")];
        bytes.extend_from_slice(value.as_bytes());
        bytes
    }

    /// Metadata describing one kernel `name` with the figures of a kernel
    /// that spills, in the encodings compilers use (fixint, uint8, uint16).
    fn metadata(name: &str) -> Vec<u8> {
        let mut kernel = vec![0x88];
        for (field, value) in [
            (".name", text(name)),
            (".symbol", text(&format!("{name}.kd"))),
            (".vgpr_count", vec![0xcc, 0x80]),
            (".sgpr_count", vec![0x0e]),
            (".vgpr_spill_count", vec![0x03]),
            (".sgpr_spill_count", vec![0x00]),
            (".group_segment_fixed_size", vec![0xcd, 0x04, 0x00]),
            (".private_segment_fixed_size", vec![0x10]),
        ] {
            kernel.extend(text(field));
            kernel.extend(value);
        }
        let mut map = vec![0x82];
        map.extend(text("amdhsa.version"));
        map.extend([0x92, 0x01, 0x01]);
        map.extend(text("amdhsa.kernels"));
        map.push(0x91);
        map.extend(kernel);
        map
    }

    /// A minimal AMD GPU ELF object holding `description` as its
    /// metadata note, in a section of its own.
    fn code_object(description: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend(7u32.to_le_bytes());
        note.extend(
            u32::try_from(description.len())
                .expect("small")
                .to_le_bytes(),
        );
        note.extend(32u32.to_le_bytes());
        note.extend(b"AMDGPU\0\0");
        note.extend(description);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        elf[18..20].copy_from_slice(&224u16.to_le_bytes());
        let note_offset = elf.len() as u64;
        elf.extend(&note);
        let sections = elf.len() as u64;
        elf[40..48].copy_from_slice(&sections.to_le_bytes());
        elf[58..60].copy_from_slice(&64u16.to_le_bytes());
        elf[60..62].copy_from_slice(&2u16.to_le_bytes());
        elf.extend([0u8; 64]);
        let mut header = [0u8; 64];
        header[4..8].copy_from_slice(&7u32.to_le_bytes());
        header[24..32].copy_from_slice(&note_offset.to_le_bytes());
        header[32..40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        elf.extend(header);
        elf
    }

    // D4
    #[test]
    fn d4_the_kernels_figures_are_read_from_the_metadata_note() {
        let object = code_object(&metadata("spill"));
        let usage = kernel_resources(&object, "spill").expect("the metadata describes it");
        assert_eq!(
            usage,
            ResourceUsage {
                registers: Some(128),
                scalar_registers: Some(14),
                spilled_vector_registers: Some(3),
                spilled_scalar_registers: Some(0),
                shared_memory_bytes: Some(1024),
                local_memory_bytes: Some(16),
                ..ResourceUsage::default()
            }
        );
        assert!(usage.spills());
        let error = kernel_resources(&object, "other").expect_err("no such kernel");
        assert!(
            error.to_string().contains("does not describe `other`"),
            "{error}"
        );
    }

    // D4
    #[test]
    fn d4_truncated_metadata_and_truncated_objects_are_errors_not_panics() {
        let description = metadata("k");
        for cut in 0..description.len() {
            assert!(read(&description[..cut]).is_err(), "metadata cut at {cut}");
        }
        let object = code_object(&description);
        for cut in 0..object.len() {
            assert!(
                kernel_resources(&object[..cut], "k").is_err(),
                "object cut at {cut}"
            );
        }
    }

    // D4
    #[test]
    fn d4_garbage_lengths_nesting_and_bytes_are_errors_not_panics() {
        // Counts and lengths far past the bytes, before any allocation.
        for bytes in [
            &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
            &[0xdf, 0xff, 0xff, 0xff, 0xff, 0x00],
            &[0xdb, 0xff, 0xff, 0xff, 0xff],
            &[0xc6, 0xff, 0xff, 0xff, 0xff, 0x00],
            &[0xc9, 0xff, 0xff, 0xff, 0xff, 0x01],
            &[0xc1],
            &[0xa2, 0xff, 0xfe],
        ] {
            assert!(read(bytes).is_err(), "{bytes:02x?}");
        }
        let deep = vec![0x91; 100_000];
        let error = read(&deep).expect_err("too deep");
        assert!(error.to_string().contains("too deep"), "{error}");
        // Every byte of the metadata replaced in turn by every value: any
        // answer but a panic will do.
        let description = metadata("k");
        for at in 0..description.len() {
            for value in 0..=255u8 {
                let mut bytes = description.clone();
                bytes[at] = value;
                let _ = kernel_resources(&code_object(&bytes), "k");
            }
        }
        // A seeded stream of noise, as an object and as metadata.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2_000 {
            let noise: Vec<u8> = (0..64)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state.to_le_bytes()[0]
                })
                .collect();
            let _ = read(&noise);
            let _ = kernel_resources(&noise, "k");
            let _ = kernel_resources(&code_object(&noise), "k");
        }
        let without = code_object(&[]);
        assert!(kernel_resources(&without, "k").is_err());
    }
}
