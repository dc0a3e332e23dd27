//! The targets file: the key components of every compiler that stored in
//! the store, for `kiln stats` and bundles.

use std::fs;
use std::io;
use std::path::Path;
use std::time::Instant;

use kiln_engine::KeyComponents;

use super::DiskStore;
use crate::lock::{Mode, PIN_WAIT, TARGETS_SLOT};
use crate::record;

impl DiskStore {
    /// The key components of every compiler that stored here.
    pub fn targets(&self) -> Vec<KeyComponents> {
        read_targets(&self.inner.files.layout.targets_file())
    }

    pub(super) fn register_target(&self, components: &KeyComponents) {
        let inner = &self.inner;
        let mut registered = inner
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if registered.contains(components) || inner.files.read_only {
            return;
        }
        let result = (|| -> io::Result<()> {
            let _guard = inner
                .files
                .locks
                .acquire(
                    TARGETS_SLOT,
                    Mode::Exclusive,
                    Some(Instant::now() + PIN_WAIT),
                )?
                .ok_or_else(|| io::Error::other("the targets list stayed locked"))?;
            let path = inner.files.layout.targets_file();
            let mut targets = read_targets(&path);
            if !targets.contains(components) {
                targets.push(components.clone());
                self.inner
                    .files
                    .publish(&path, &record::seal_targets(&targets))?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => registered.push(components.clone()),
            Err(error) => log::debug!("cannot register {components} with the store: {error}"),
        }
    }

    pub(crate) fn register(&self, components: &KeyComponents) {
        self.register_target(components);
    }
}

pub(crate) fn read_targets(path: &Path) -> Vec<KeyComponents> {
    fs::read(path)
        .ok()
        .and_then(|sealed| record::open_targets(&sealed).ok())
        .unwrap_or_default()
}
