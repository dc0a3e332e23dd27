//! The targets file: the key components of every compiler that stored in
//! the store, for `kiln stats` and bundles.
//!
//! **Invariant:** a compiler's components are in the file once one of its
//! puts stored something; this process writes each at most once.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use kiln_engine::KeyComponents;

use crate::files::Files;
use crate::lock::{Mode, PIN_WAIT, TARGETS_SLOT};
use crate::record;

/// The compilers this process has written to the targets file.
#[derive(Debug, Default)]
pub(crate) struct Targets {
    registered: Mutex<Vec<KeyComponents>>,
}

impl Targets {
    /// The key components of every compiler that stored in `files`.
    pub(crate) fn list(files: &Files) -> Vec<KeyComponents> {
        read_targets(&files.layout.targets_file())
    }

    /// Adds `components` to the targets file of `files`, unless this
    /// process already did.
    pub(crate) fn register(&self, files: &Files, components: &KeyComponents) {
        let mut registered = self
            .registered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if registered.contains(components) || files.read_only {
            return;
        }
        let result = (|| -> io::Result<()> {
            let _guard = files
                .locks
                .acquire(
                    TARGETS_SLOT,
                    Mode::Exclusive,
                    Some(Instant::now() + PIN_WAIT),
                )?
                .ok_or_else(|| io::Error::other("the targets list stayed locked"))?;
            let path = files.layout.targets_file();
            let mut targets = read_targets(&path);
            if !targets.contains(components) {
                targets.push(components.clone());
                files.publish(&path, &record::seal_targets(&targets))?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => registered.push(components.clone()),
            Err(error) => log::debug!("cannot register {components} with the store: {error}"),
        }
    }
}

pub(crate) fn read_targets(path: &Path) -> Vec<KeyComponents> {
    fs::read(path)
        .ok()
        .and_then(|sealed| record::open_targets(&sealed).ok())
        .unwrap_or_default()
}
