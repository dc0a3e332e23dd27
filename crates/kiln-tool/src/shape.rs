//! The JSON shapes `--json` prints that are not a report of the command's
//! own: a store entry and a store key, written from the library's types so
//! that the output stays the same when those change. Field names are
//! snake_case, digests are lower-case hex strings, and no number is wider
//! than 64 bits (a kernel id's 128-bit digest is hex), so every JSON
//! reader takes them. `docs/CLI.md` lists the shapes.

use kiln_engine::store::hex;
use kiln_engine::{ArtifactReport, Explanation, KeySubject, ResourceUsage, StoreKey};
use kiln_store::{Entry, EntryInfo};
use serde::Serialize;

use crate::backend::variant_label;

/// One entry of `kiln ls --json`.
#[derive(Debug, Serialize)]
pub struct EntryShape {
    /// `kernel`, `source`, or a named blob's kind (`wgpu pipeline cache`,
    /// `remembered failure`).
    pub kind: String,
    /// The key: `null` for a named blob.
    pub key: Option<KeyShape>,
    /// A named blob's components, as `[name, value]` pairs; empty for an
    /// artifact.
    pub components: Vec<(String, String)>,
    /// The BLAKE3 digest of the object, 64 hex digits.
    pub object: String,
    /// The object's length in bytes.
    pub size: u64,
    /// Seconds of compile work the artifact took (what a hit saves).
    pub work_seconds: f64,
    /// When it was stored, in seconds since the Unix epoch.
    pub stored_at: u64,
    /// When it was last read, in seconds since the Unix epoch; `null` when
    /// its object is missing.
    pub accessed_at: Option<u64>,
    /// What the artifact's kernel uses and what its compile warned of
    /// (D4); `null` for a named blob, an artifact stored before artifacts
    /// carried reports, or an object that cannot be read.
    pub resources: Option<ResourcesShape>,
}

impl EntryShape {
    /// The shape of `info`, with the `report` its artifact carries.
    pub fn new(info: &EntryInfo, report: Option<&ArtifactReport>) -> Self {
        let resources = report.map(ResourcesShape::from);
        match &info.entry {
            Entry::Record(record) => Self {
                kind: if record.key.is_source() {
                    "source"
                } else {
                    "kernel"
                }
                .into(),
                key: Some(KeyShape::from(&record.key)),
                components: Vec::new(),
                object: hex(&record.object),
                size: record.size,
                work_seconds: record.work_nanos as f64 * 1e-9,
                stored_at: record.stored_at,
                accessed_at: info.accessed_at,
                resources,
            },
            Entry::Blob(record) => Self {
                kind: record.key.kind.clone(),
                key: None,
                components: record.key.components.clone(),
                object: hex(&record.object),
                size: record.size,
                work_seconds: 0.0,
                stored_at: record.stored_at,
                accessed_at: info.accessed_at,
                resources: None,
            },
        }
    }
}

/// An artifact's report (D4) in `kiln ls --json`: the kernel's
/// [`ResourceUsage`] as its fields (each `null` when its backend does not
/// have it or its compiler did not say it), whether it spills, and the
/// compile's warnings.
#[derive(Debug, Serialize)]
pub struct ResourcesShape {
    /// The figures, flattened into this object.
    #[serde(flatten)]
    pub resources: ResourceUsage,
    /// Whether the kernel spills registers to memory.
    pub spills: bool,
    /// The compile's warnings and remarks, one line each as the reporter
    /// printed them (`3:5: warning: ...`).
    pub warnings: Vec<String>,
}

impl From<&ArtifactReport> for ResourcesShape {
    fn from(report: &ArtifactReport) -> Self {
        Self {
            resources: report.resources.clone(),
            spills: report.spills(),
            warnings: report.warnings.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A store key: what an artifact was stored under.
#[derive(Debug, Serialize)]
pub struct KeyShape {
    /// The kernel's name; `null` for a key of lowered source.
    pub kernel: Option<String>,
    /// The kernel id's digest (32 hex digits), or the source text's BLAKE3
    /// (64 hex digits).
    pub digest: String,
    /// `name#digest` or `source:digest` as logs print it.
    pub subject: String,
    /// The variant as its backend names it: `sm_90`, `gfx90a`, `-`.
    pub variant: String,
    /// The backend: `cuda`, `hip`, `wgpu`.
    pub backend: String,
    /// The compiler's identity and version.
    pub compiler: String,
    /// The architecture the compiler was keyed to (`per variant` when each
    /// artifact's is in its variant).
    pub architecture: String,
    /// The compile options, in a canonical order.
    pub options: String,
    /// The entry point, when the compiler takes it apart from the source.
    pub entry_point: Option<String>,
    /// The store format version the key was made under.
    pub format: u32,
    /// The key's BLAKE3 digest, 64 hex digits: the name of its record.
    pub key_digest: String,
}

impl From<&StoreKey> for KeyShape {
    fn from(key: &StoreKey) -> Self {
        let (kernel, digest) = match &key.subject {
            KeySubject::Kernel { name, digest } => (Some(name.clone()), format!("{digest:032x}")),
            KeySubject::Source { digest } => (None, hex(digest)),
        };
        Self {
            kernel,
            digest,
            subject: key.subject_text(),
            variant: variant_label(key),
            backend: key.components.backend.clone(),
            compiler: key.components.compiler.clone(),
            architecture: key.components.architecture.clone(),
            options: key.components.options.clone(),
            entry_point: key.entry_point.clone(),
            format: key.format,
            key_digest: hex(&key.digest()),
        }
    }
}

/// Why a kernel misses (`kiln explain --json`).
#[derive(Debug, Serialize)]
pub struct ExplanationShape {
    /// `never_seen`, `held`, `changed` or `gone`.
    pub state: &'static str,
    /// The explanation as the table prints it.
    pub text: String,
    /// When the entry it speaks of was stored, in seconds since the Unix
    /// epoch; `null` for `never_seen`.
    pub stored_at: Option<u64>,
    /// For `changed`: the first component that differs (`compiler`,
    /// `architecture`, `compile_options`, `source`, ...).
    pub component: Option<String>,
    /// For `changed`: its value in the entry held.
    pub stored: Option<String>,
    /// For `changed`: its value in the key asked for.
    pub asked: Option<String>,
}

impl From<&Explanation> for ExplanationShape {
    fn from(explanation: &Explanation) -> Self {
        let mut shape = Self {
            state: "never_seen",
            text: explanation.to_string(),
            stored_at: None,
            component: None,
            stored: None,
            asked: None,
        };
        match explanation {
            Explanation::NeverSeen => {}
            Explanation::Held { stored_at } => {
                shape.state = "held";
                shape.stored_at = Some(*stored_at);
            }
            Explanation::Gone { stored_at } => {
                shape.state = "gone";
                shape.stored_at = Some(*stored_at);
            }
            Explanation::Changed {
                difference,
                stored_at,
            } => {
                shape.state = "changed";
                shape.stored_at = Some(*stored_at);
                shape.component = Some(difference.component.to_string().replace(' ', "_"));
                shape.stored = Some(difference.stored.clone());
                shape.asked = Some(difference.asked.clone());
            }
        }
        shape
    }
}
