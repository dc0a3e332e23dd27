//! `kiln show KERNEL`: what the store holds of a kernel, readable: the
//! recipe kept after its artifact (the compiler's arguments or constants,
//! its source) and the artifact itself (PTX and SASS, a code object's
//! instructions, WGSL or SPIR-V), or with `--raw` the artifact's bytes.

use std::io::{IsTerminal, Write};

use anyhow::{Result, bail};
use clap::Args;
use kiln_engine::KeySubject;
use kiln_store::{DiskStore, Entry};
use serde::Serialize;

use crate::backend::show::{Form, Shown, read};
use crate::console::outln;
use crate::format;
use crate::output::Output;

/// `kiln show` options.
#[derive(Debug, Args)]
pub struct Arguments {
    /// The kernel: part of its name, its `name#digest` text as logs print
    /// it, or its 32-digit id digest (or the digest's start).
    pub kernel: String,
    /// Only the kernel's entries of this backend (cuda, hip, wgpu).
    #[arg(long)]
    pub backend: Option<String>,
    /// Write the artifact's bytes (a cubin, a code object, WGSL text, a
    /// SPIR-V module) to standard output, which must not be a terminal;
    /// exactly one entry must match.
    #[arg(long)]
    pub raw: bool,
}

/// One stored entry of a kernel.
struct Found {
    /// `name#digest`, the digest as 32 hex digits.
    kernel: String,
    backend: String,
    variant: String,
    compiler: String,
    stored_at: u64,
    shown: Result<Shown, String>,
}

/// A readable form, as `--json` prints it.
#[derive(Debug, Serialize)]
struct FormShape {
    /// What it is: `PTX (sm_90)`, `SASS (cuobjdump)`, `source`.
    name: String,
    /// Its text; `null` when it cannot be shown here.
    text: Option<String>,
    /// Why it cannot be shown here (a disassembler not found).
    unavailable: Option<String>,
}

/// One entry of `kiln show --json`.
#[derive(Debug, Serialize)]
struct ShownShape {
    kernel: String,
    backend: String,
    variant: String,
    compiler: String,
    /// When it was stored, in seconds since the Unix epoch.
    stored_at: u64,
    /// What the raw bytes are, and how many.
    raw_kind: Option<&'static str>,
    raw_bytes: Option<usize>,
    recipe: Vec<FormShape>,
    artifact: Vec<FormShape>,
    /// Why its bytes could not be read.
    error: Option<String>,
}

fn form_shape(form: &Form) -> FormShape {
    FormShape {
        name: form.name.clone(),
        text: form.text.as_ref().ok().cloned(),
        unavailable: form.text.as_ref().err().cloned(),
    }
}

/// Whether the kernel `name` of id digest `digest` is the one `query`
/// names.
fn matches(query: &str, name: &str, digest: u128) -> bool {
    let full = format!("{digest:032x}");
    let query = query.trim();
    if let Some((query_name, query_digest)) = query.split_once('#') {
        return name == query_name && full.starts_with(&query_digest.to_ascii_lowercase());
    }
    let is_digest = query.len() >= 8 && query.chars().all(|c| c.is_ascii_hexdigit());
    name.contains(query) || (is_digest && full.starts_with(&query.to_ascii_lowercase()))
}

/// Shows every stored entry of the kernel `arguments` names.
pub fn run(store: &DiskStore, arguments: &Arguments, output: &Output) -> Result<()> {
    let mut found = Vec::new();
    store.entries(&mut |entry| {
        let Entry::Record(record) = &entry.entry else {
            return;
        };
        let KeySubject::Kernel { name, digest } = &record.key.subject else {
            return;
        };
        let backend = &record.key.components.backend;
        if !matches(&arguments.kernel, name, *digest)
            || arguments
                .backend
                .as_ref()
                .is_some_and(|asked| asked != backend)
        {
            return;
        }
        let shown = store
            .object_bytes(record)
            .ok_or_else(|| "its bytes could not be read".to_owned())
            .and_then(|bytes| read(backend, &bytes));
        found.push(Found {
            kernel: format!("{name}#{digest:032x}"),
            backend: backend.clone(),
            variant: crate::backend::variant_label(&record.key),
            compiler: record.key.components.compiler.clone(),
            stored_at: record.stored_at,
            shown,
        });
    })?;
    found.sort_by(|a, b| {
        (&a.kernel, &a.backend, &a.variant).cmp(&(&b.kernel, &b.backend, &b.variant))
    });
    if found.is_empty() {
        bail!(
            "{}: the store holds no such kernel (`kiln ls` lists what it holds)",
            arguments.kernel
        );
    }
    if arguments.raw {
        return write_raw(&found, arguments);
    }
    let shapes: Vec<ShownShape> = found.iter().map(shape).collect();
    output.print(&shapes, || {
        for (index, entry) in found.iter().enumerate() {
            if index > 0 {
                outln!();
            }
            print(entry);
        }
    })
}

fn shape(found: &Found) -> ShownShape {
    let shown = found.shown.as_ref().ok();
    ShownShape {
        kernel: found.kernel.clone(),
        backend: found.backend.clone(),
        variant: found.variant.clone(),
        compiler: found.compiler.clone(),
        stored_at: found.stored_at,
        raw_kind: shown.map(|shown| shown.raw_kind),
        raw_bytes: shown.map(|shown| shown.raw.len()),
        recipe: shown
            .map(|shown| shown.recipe.iter().map(form_shape).collect())
            .unwrap_or_default(),
        artifact: shown
            .map(|shown| shown.artifact.iter().map(form_shape).collect())
            .unwrap_or_default(),
        error: found.shown.as_ref().err().cloned(),
    }
}

fn print(found: &Found) {
    outln!(
        "{} ({} {}, {}, stored {})",
        found.kernel,
        found.backend,
        found.variant,
        format::compiler(&found.compiler, crate::table::is_wide()),
        format::ago(found.stored_at)
    );
    let shown = match &found.shown {
        Ok(shown) => shown,
        Err(error) => {
            outln!("  unreadable: {error}");
            return;
        }
    };
    if shown.recipe.is_empty() {
        outln!("-- recipe: none kept with this artifact");
    }
    for form in shown.recipe.iter().chain(&shown.artifact) {
        match &form.text {
            Ok(text) => {
                outln!("-- {}", form.name);
                outln!("{}", text.trim_end());
            }
            Err(why) => outln!("-- {}: not shown: {why}", form.name),
        }
    }
    outln!(
        "-- raw: {} B of {} (kiln show {} --raw > FILE)",
        shown.raw.len(),
        shown.raw_kind,
        found.kernel
    );
}

/// Writes the one matching entry's artifact bytes to standard output.
fn write_raw(found: &[Found], arguments: &Arguments) -> Result<()> {
    let [one] = found else {
        let names: Vec<String> = found
            .iter()
            .map(|entry| format!("{} ({} {})", entry.kernel, entry.backend, entry.variant))
            .collect();
        bail!(
            "--raw writes one entry, and {} match {:?}: name one by its `name#digest` and \
             --backend\n  {}",
            found.len(),
            arguments.kernel,
            names.join("\n  ")
        );
    };
    let shown = match &one.shown {
        Ok(shown) => shown,
        Err(error) => bail!("{}: {error}", one.kernel),
    };
    let mut stdout = std::io::stdout().lock();
    if stdout.is_terminal() {
        bail!(
            "--raw writes {} bytes of {}: redirect standard output to a file (`> kernel.bin`)",
            shown.raw.len(),
            shown.raw_kind
        );
    }
    stdout.write_all(&shown.raw)?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn a_kernel_is_named_by_part_of_its_name_its_name_and_digest_or_its_digest() {
        let digest = 0x0123_4567_89ab_cdef_0011_2233_4455_6677_u128;
        assert!(matches("saxpy", "saxpy_f32", digest));
        assert!(matches("saxpy_f32#0123", "saxpy_f32", digest));
        assert!(
            !matches("saxpy#0123", "saxpy_f32", digest),
            "the name whole"
        );
        assert!(!matches("saxpy_f32#ffff", "saxpy_f32", digest));
        assert!(matches("0123456789ABCDEF", "other", digest));
        assert!(
            !matches("0123", "other", digest),
            "a digest of 8 digits or more"
        );
    }
}
