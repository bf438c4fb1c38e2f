//! Where perfmodel's inputs and outputs live: collected data, trained models, device profiles and the zoo.
//!
//! Resolved once, as ripgrep resolves its low-level arguments once into its high-level ones: the command line
//! (or a library caller) names what it overrides, [`Dirs::resolve`] fills in the rest, and every command and
//! estimator reads the same four paths.

use std::path::{Path, PathBuf};

/// The project directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// Collected measurements, `<data>/<device>/<layer_type>.csv` (and the template method's samples).
    pub data: PathBuf,
    /// Trained models, `<models>/<device>/` (and a device's calibration).
    pub models: PathBuf,
    /// Device profiles, `<collectors>/<device>.toml`.
    pub collectors: PathBuf,
    /// The zoo: architectures as net.json, the sampled configs, the holdout and calibration networks.
    pub zoo: PathBuf,
}

/// Overrides of [`Dirs`], each `None` for the default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirOverrides {
    pub data: Option<PathBuf>,
    pub models: Option<PathBuf>,
    pub collectors: Option<PathBuf>,
    pub zoo: Option<PathBuf>,
}

impl Dirs {
    /// The named directories, and for the others their default ([`default_dir`]).
    pub fn resolve(overrides: DirOverrides) -> Dirs {
        let or_default = |dir: Option<PathBuf>, name: &str| dir.unwrap_or_else(|| default_dir(name));
        Dirs {
            data: or_default(overrides.data, "data"),
            models: or_default(overrides.models, "models"),
            collectors: or_default(overrides.collectors, "collectors"),
            zoo: or_default(overrides.zoo, "zoo"),
        }
    }

    pub fn with_data(mut self, dir: impl Into<PathBuf>) -> Dirs {
        self.data = dir.into();
        self
    }

    pub fn with_models(mut self, dir: impl Into<PathBuf>) -> Dirs {
        self.models = dir.into();
        self
    }

    pub fn with_collectors(mut self, dir: impl Into<PathBuf>) -> Dirs {
        self.collectors = dir.into();
        self
    }

    pub fn with_zoo(mut self, dir: impl Into<PathBuf>) -> Dirs {
        self.zoo = dir.into();
        self
    }

    /// The sampled layer configs `collect` measures by default.
    pub fn configs(&self) -> PathBuf {
        self.zoo.join("configs.json")
    }
}

impl Default for Dirs {
    /// Every directory at its default.
    fn default() -> Dirs {
        Dirs::resolve(DirOverrides::default())
    }
}

/// A project directory (`data`, `models`, `zoo`, `collectors`): `./NAME` when it exists, else the one shipped
/// beside the sources perfmodel was built from, so `cargo run`, an installed binary and a linked library all find
/// them.
pub fn default_dir(name: &str) -> PathBuf {
    let local = PathBuf::from(name);
    if local.exists() {
        return local;
    }
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    if shipped.exists() {
        shipped
    } else {
        local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_are_kept_and_the_rest_defaults() {
        let dirs = Dirs::resolve(DirOverrides { models: Some("/tmp/m".into()), ..DirOverrides::default() });
        assert_eq!(dirs.models, PathBuf::from("/tmp/m"));
        assert_eq!(dirs.data, default_dir("data"));
        assert_eq!(dirs.configs(), default_dir("zoo").join("configs.json"));
        assert_eq!(Dirs::default().with_zoo("z").zoo, PathBuf::from("z"));
    }
}
