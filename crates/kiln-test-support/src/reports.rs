//! What the report tests of the backends that compile C++ share (D3, D4):
//! the kernels they compile (one within its launch bounds, one made to
//! spill) and a listener that keeps what a cache's reporter heard, with the
//! check of a spilling kernel's one report. The backends pass in their
//! caches: this crate names none of them.

use std::sync::{Arc, Mutex, MutexGuard};

use kiln_engine::{CompilationTarget, Diagnostic, KernelCache, KernelRecord, Severity};

/// A kernel with 1 KiB of static shared memory (256 floats) and launch
/// bounds of 128 threads, that does not spill.
pub const BOUNDED: &str = r#"extern "C" __global__ void __launch_bounds__(128) bounded(float* y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? y[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % 128] * 2.0f;
}
"#;

/// The source of kernel `spilling`, whose unrolled array of `floats`
/// floats is all live at once: enough floats spill from any register file.
pub fn spilling_source(floats: usize) -> String {
    format!(
        "extern \"C\" __global__ void spilling(float* out, int n) {{\n\
         \x20   float a[{floats}];\n\
         #pragma unroll\n\
         \x20   for (int i = 0; i < {floats}; ++i) a[i] = out[i * n + threadIdx.x];\n\
         #pragma unroll\n\
         \x20   for (int j = 0; j < 8; ++j)\n\
         #pragma unroll\n\
         \x20       for (int i = 0; i < {floats}; ++i) a[i] = a[i] * a[(i + j) % {floats}] + 1.0f;\n\
         \x20   float total = 0.0f;\n\
         #pragma unroll\n\
         \x20   for (int i = 0; i < {floats}; ++i) total += a[i];\n\
         \x20   out[threadIdx.x] = total;\n\
         }}\n"
    )
}

/// The records the reporters of the caches it listens to heard, in order.
#[derive(Debug, Clone, Default)]
pub struct Heard(Arc<Mutex<Vec<KernelRecord>>>);

impl Heard {
    /// Makes `cache` report every artifact it builds to this.
    pub fn listen<T: CompilationTarget>(&self, cache: &KernelCache<T>) {
        let listener = Arc::clone(&self.0);
        cache.set_reporter(move |_, record| {
            listener
                .lock()
                .expect("the listener does not panic")
                .push(record.clone());
        });
    }

    /// What was heard so far.
    pub fn records(&self) -> MutexGuard<'_, Vec<KernelRecord>> {
        self.0.lock().expect("the listener does not panic")
    }

    /// Checks that one record was heard, holding one warning that the
    /// kernel spills registers whose message holds `mentions`, and that its
    /// diagnostics are `warnings`, those the artifact keeps.
    pub fn assert_one_spill_warning(&self, mentions: &str, warnings: &[Diagnostic]) {
        let heard = self.records();
        assert_eq!(heard.len(), 1, "one built artifact, one report");
        let spill_warnings: Vec<_> = heard[0]
            .diagnostics
            .iter()
            .filter(|diagnostic| diagnostic.message.contains("spills registers"))
            .collect();
        assert_eq!(spill_warnings.len(), 1, "{:?}", heard[0].diagnostics);
        assert_eq!(spill_warnings[0].severity, Severity::Warning);
        assert!(
            spill_warnings[0].message.contains(mentions),
            "the warning holds {mentions}: {}",
            spill_warnings[0].message
        );
        assert_eq!(
            heard[0].diagnostics, warnings,
            "the artifact keeps what the reporter heard"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spilling_source_holds_its_floats_in_every_loop() {
        for floats in [64, 192] {
            let source = spilling_source(floats);
            assert!(source.contains(&format!("float a[{floats}];")), "{source}");
            assert_eq!(
                source.matches(&format!("i < {floats}; ++i")).count(),
                3,
                "{source}"
            );
            assert!(source.contains(&format!("(i + j) % {floats}]")), "{source}");
            assert_eq!(source.matches("#pragma unroll\n").count(), 4, "{source}");
        }
    }
}
