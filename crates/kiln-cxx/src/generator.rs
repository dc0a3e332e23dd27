//! Where a C++ kernel's source comes from: user code run when kiln lowers
//! the kernel, or a fixed text.

use std::sync::Arc;

use kiln_engine::CompileFailure;

/// Generates a kernel's C++ source for a device of architecture `A` (the
/// backend's `Architecture`): the user code kiln runs when it lowers the
/// kernel, on a worker thread of the batch, only when the kernel is not
/// loaded already.
///
/// Closures `Fn(A) -> Result<String, CompileFailure>` are generators.
///
/// # Contract
///
/// The same generator, asked for the same architecture, returns the same
/// text: the kernel's id stands for it, so the id must cover every
/// parameter the generator reads (see [`Kernel`](kiln_engine::Kernel)'s
/// contract).
pub trait SourceGenerator<A>: Send + Sync {
    /// The source for a device of `architecture`.
    ///
    /// # Errors
    ///
    /// Why no source can be made: a [`CompileFailure`], with a hint when
    /// the cause is a choice the caller can change. The kernel fails alone
    /// with it.
    fn generate(&self, architecture: A) -> Result<String, CompileFailure>;

    /// The length of the text it makes, when known without making it: what
    /// a kernel's [`cost_hint`](kiln_engine::Kernel::cost_hint) is made of,
    /// so that a batch compiles its longest kernels first. The default, for
    /// a generator that runs code, is `None`.
    fn size_hint(&self) -> Option<usize> {
        None
    }
}

/// What compiling a C++ kernel costs, relative to the others: the length
/// of its source when its generator knows it without running, plus its
/// headers'. What a CUDA or HIP kernel's
/// [`cost_hint`](kiln_engine::Kernel::cost_hint) is.
pub fn source_cost<A>(generator: &dyn SourceGenerator<A>, headers: &[crate::Header]) -> u64 {
    let source = generator.size_hint().unwrap_or(0);
    let headers: usize = headers.iter().map(|header| header.text.len()).sum();
    u64::try_from(source + headers).unwrap_or(u64::MAX)
}

impl<A, F> SourceGenerator<A> for F
where
    F: Fn(A) -> Result<String, CompileFailure> + Send + Sync,
{
    fn generate(&self, architecture: A) -> Result<String, CompileFailure> {
        self(architecture)
    }
}

/// A generator that returns the text it was given, whatever the
/// architecture: a kernel built from a fixed source.
#[derive(Debug, Clone)]
pub struct FixedSource(Arc<str>);

impl FixedSource {
    /// The generator of `text`.
    pub fn new(text: Arc<str>) -> Self {
        Self(text)
    }

    /// The text it returns.
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl<A> SourceGenerator<A> for FixedSource {
    fn generate(&self, _architecture: A) -> Result<String, CompileFailure> {
        Ok(self.0.to_string())
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // F2
    #[test]
    fn a_fixed_source_knows_its_size_and_a_generator_does_not() {
        let text = "__global__ void k() {}";
        let fixed = FixedSource::new(Arc::from(text));
        assert_eq!(SourceGenerator::<u32>::size_hint(&fixed), Some(text.len()));
        let generated = |_: u32| Ok::<_, CompileFailure>(String::from(text));
        assert_eq!(generated.size_hint(), None);
    }

    #[test]
    fn a_fixed_source_returns_its_text_for_every_architecture() {
        let source = FixedSource::new(Arc::from("__global__ void k() {}"));
        assert_eq!(
            SourceGenerator::<u32>::generate(&source, 7).expect("a fixed text"),
            "__global__ void k() {}"
        );
        assert_eq!(
            SourceGenerator::<&str>::generate(&source, "gfx90a").expect("a fixed text"),
            source.text()
        );
    }
}
