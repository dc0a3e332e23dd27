//! The conformance suite against the fake target, with and without a store:
//! the same checks every real backend runs against its compiler.

use std::time::Duration;

use kiln_engine::conformance::ConformanceSubject;
use kiln_engine::fake::{FakeKernel, FakeTarget};

struct Fake {
    persists: bool,
}

impl ConformanceSubject for Fake {
    type Target = FakeTarget;

    fn target(&self) -> FakeTarget {
        if self.persists {
            FakeTarget::persisting()
        } else {
            FakeTarget::storeless()
        }
    }

    fn variant(&self) {}

    fn distinct(&self, index: usize) -> Box<FakeKernel> {
        Box::new(FakeKernel::new(number(index)))
    }

    fn sharing_source(&self, index: usize) -> Box<FakeKernel> {
        Box::new(FakeKernel::new(1_000 + number(index)).sharing_source("one text"))
    }

    fn lasting(&self, index: usize) -> Box<FakeKernel> {
        Box::new(FakeKernel::new(5_000 + number(index)).sleeping(Duration::from_millis(25)))
    }

    fn most_at_once(&self, target: &FakeTarget) -> Option<usize> {
        Some(target.fake_compiler().most_at_once())
    }

    fn failing(&self, index: usize) -> Box<FakeKernel> {
        Box::new(FakeKernel::new(2_000 + number(index)).failing())
    }

    fn panicking(&self, index: usize) -> Option<Box<FakeKernel>> {
        Some(Box::new(
            FakeKernel::new(3_000 + number(index)).panicking_in_lower(),
        ))
    }

    fn refused(&self, index: usize) -> Option<Box<FakeKernel>> {
        Some(Box::new(FakeKernel::new(4_000 + number(index)).refused()))
    }

    fn switch_store(&self, target: &mut FakeTarget) -> bool {
        target.switch_store();
        true
    }
}

fn number(index: usize) -> u32 {
    u32::try_from(index).expect("the suite uses small indices")
}

mod persisting {
    kiln_engine::conformance_suite!(Ok::<_, String>(super::Fake { persists: true }));
}

mod storeless {
    kiln_engine::conformance_suite!(Ok::<_, String>(super::Fake { persists: false }));
}
