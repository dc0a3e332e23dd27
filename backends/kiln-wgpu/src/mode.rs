//! The adapter a compile-only target stands for (L11): its name and the
//! shader features it has, as a built-in profile or a file written on the
//! machine that has the adapter.
//!
//! A wgpu artifact depends on no device, but what a program loads does: a
//! kernel that needs a feature (f16, i64, subgroups, ...) is refused where
//! it is missing, and a program that chooses its kernels by
//! [`WgpuTarget::features`](crate::WgpuTarget::features) chooses by them.
//! So a process in compile-only mode is told the adapter it prebuilds for,
//! with `KILN_WGPU_PROFILE`: the name of a built-in profile
//! ([`AdapterProfile::BUILT_IN`]) or the path of a profile file that
//! [`AdapterProfile::of_device`] and [`AdapterProfile::to_text`] wrote on
//! the machine with the adapter. Without one, a compile-only target stands
//! for `baseline`, an adapter without shader features.
//!
//! A profile file is lines of `key = value`, `#` starting a comment:
//!
//! ```text
//! # kiln wgpu adapter profile
//! name = llvmpipe (LLVM 15.0.6, 256 bits)
//! driver = llvmpipe, Mesa 22.3.6
//! features = SHADER_F16, SHADER_INT64
//! ```

use std::path::Path;

use crate::device::WgpuDevice;
use crate::error::Error;
use crate::features::{SHADER_FEATURES, feature_names, parse_features};

/// The adapter a compile-only target stands for: a name for messages and
/// the shader features kernels may use on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterProfile {
    name: String,
    driver: Option<String>,
    features: wgpu::Features,
}

impl AdapterProfile {
    /// The built-in profiles, by name: `baseline`, an adapter with none of
    /// the shader features (what every adapter has); `lavapipe`, Mesa's
    /// software Vulkan driver (llvmpipe) as Debian 12's Mesa 22.3 has it.
    /// Another adapter's profile is a file written on its machine.
    pub const BUILT_IN: &'static [&'static str] = &["baseline", "lavapipe"];

    /// The built-in profile `name` (see [`BUILT_IN`](Self::BUILT_IN)).
    pub fn built_in(name: &str) -> Option<Self> {
        let features = match name {
            "baseline" => wgpu::Features::empty(),
            // Measured on lavapipe here: `a_built_in_lavapipe_profile_is_
            // what_lavapipe_has` fails when Mesa's answer changes.
            "lavapipe" => LAVAPIPE_FEATURES,
            _ => return None,
        };
        Some(Self {
            name: name.to_owned(),
            driver: None,
            features,
        })
    }

    /// A profile of `name` standing for an adapter with `features` (those of
    /// [`SHADER_FEATURES`] count).
    pub fn new(name: impl Into<String>, features: wgpu::Features) -> Self {
        Self {
            name: name.into(),
            driver: None,
            features: features & SHADER_FEATURES,
        }
    }

    /// The profile of the adapter `device` is on: its name, driver and the
    /// shader features of the device (those [`WgpuDevice::open`] asked
    /// for), to be written with [`to_text`](Self::to_text) on the machine
    /// with the adapter and read where it is not.
    pub fn of_device(device: &WgpuDevice) -> Self {
        let info = device.info();
        Self {
            name: info.name.clone(),
            driver: Some(format!("{}, {}", info.driver, info.driver_info)),
            features: device.features() & SHADER_FEATURES,
        }
    }

    /// The profile `named`: a file at that path when there is one, else a
    /// built-in profile of that name.
    ///
    /// # Errors
    ///
    /// [`Error::AdapterProfile`]: neither a readable file nor a built-in
    /// name, or a file that does not parse.
    pub fn find(named: &str) -> Result<Self, Error> {
        let path = Path::new(named);
        if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|error| Error::AdapterProfile {
                profile: named.to_owned(),
                detail: format!("the file cannot be read: {error}"),
            })?;
            return Self::parse(&text).map_err(|detail| Error::AdapterProfile {
                profile: named.to_owned(),
                detail,
            });
        }
        Self::built_in(named).ok_or_else(|| Error::AdapterProfile {
            profile: named.to_owned(),
            detail: format!(
                "no such file, and no built-in profile of that name (built in: {}); write an \
                 adapter's profile on its machine with AdapterProfile::of_device and to_text",
                Self::BUILT_IN.join(", ")
            ),
        })
    }

    /// The profile a profile file holds (see the module's documentation).
    ///
    /// # Errors
    ///
    /// A line that is not `key = value`, an unknown key or feature, or no
    /// `name`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut name = None;
        let mut driver = None;
        let mut features = wgpu::Features::empty();
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!(
                    "line {} is not `key = value`: {line:?}",
                    number + 1
                ));
            };
            let value = value.trim();
            match key.trim() {
                "name" => name = Some(value.to_owned()),
                "driver" => driver = Some(value.to_owned()),
                "features" => {
                    features = parse_features(value)
                        .map_err(|error| format!("line {}: {error}", number + 1))?;
                }
                other => {
                    return Err(format!(
                        "line {}: `{other}` is not a key of a profile (name, driver, features)",
                        number + 1
                    ));
                }
            }
        }
        let name = name.ok_or_else(|| "the profile names no adapter (`name = ...`)".to_owned())?;
        Ok(Self {
            name,
            driver,
            features: features & SHADER_FEATURES,
        })
    }

    /// The profile as a profile file's text, which [`parse`](Self::parse)
    /// reads back.
    pub fn to_text(&self) -> String {
        let mut text = String::from("# kiln wgpu adapter profile\n");
        text.push_str(&format!("name = {}\n", self.name));
        if let Some(driver) = &self.driver {
            text.push_str(&format!("driver = {driver}\n"));
        }
        text.push_str(&format!(
            "features = {}\n",
            feature_names(self.features).join(", ")
        ));
        text
    }

    /// The adapter's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The adapter's driver, when the profile was written on its machine.
    pub fn driver(&self) -> Option<&str> {
        self.driver.as_deref()
    }

    /// The shader features the adapter has.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }
}

/// What lavapipe (Mesa 22.3.6, LLVM 15.0.6) offers of [`SHADER_FEATURES`],
/// as `WgpuDevice::open` opens it.
const LAVAPIPE_FEATURES: wgpu::Features = wgpu::Features::SHADER_FLOAT32_ATOMIC
    .union(wgpu::Features::TEXTURE_FORMAT_16BIT_NORM)
    .union(wgpu::Features::TEXTURE_ATOMIC)
    .union(wgpu::Features::SHADER_F64)
    .union(wgpu::Features::SHADER_I16)
    .union(wgpu::Features::SHADER_INT64)
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
    .union(wgpu::Features::MEMORY_DECORATION_COHERENT)
    .union(wgpu::Features::MEMORY_DECORATION_VOLATILE)
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::IMMEDIATES);

/// The profile compile-only mode names for wgpu targets (`KILN_WGPU_PROFILE`,
/// or a [`CompileOnly`](kiln_engine::mode::CompileOnly)'s), `baseline`
/// when it names none; `None` outside compile-only mode.
///
/// # Errors
///
/// The profile named cannot be found or read ([`AdapterProfile::find`]).
pub(crate) fn profile_of_mode() -> Option<Result<AdapterProfile, Error>> {
    let plan = kiln_engine::mode::compile_only()?;
    Some(match plan.wgpu() {
        Some(named) => AdapterProfile::find(named),
        None => Ok(AdapterProfile::built_in("baseline").expect("a built-in profile")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // L11
    #[test]
    fn a_profile_written_reads_back_and_a_bad_one_says_why() {
        let mut profile = AdapterProfile::new(
            "some GPU",
            wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::PIPELINE_CACHE,
        );
        profile.driver = Some("a driver, 1.2".into());
        let read = AdapterProfile::parse(&profile.to_text()).expect("it parses");
        assert_eq!(read, profile);
        assert_eq!(
            read.features(),
            wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP,
            "only shader features count"
        );
        assert!(
            AdapterProfile::parse("name = x\nfeatures = SHADER_F128")
                .expect_err("no such feature")
                .contains("line 2")
        );
        assert!(
            AdapterProfile::parse("features = SHADER_F16")
                .expect_err("no name")
                .contains("name")
        );
        let unknown = AdapterProfile::find("no-such-profile").expect_err("neither");
        assert!(
            unknown.to_string().contains("baseline, lavapipe"),
            "{unknown}"
        );
    }
}
