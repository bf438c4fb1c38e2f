//! Typed errors for the library. The binary turns them into messages and exit codes; every error about user
//! input names the file, and where it applies the layer (name and index) and the field, so a user can fix the
//! input without reading the source.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in a network description an error was found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// File the network came from (`<memory>` for text passed in directly).
    pub file: String,
    /// Layer name and 0-based index, when the error is inside one layer.
    pub layer: Option<(String, usize)>,
    /// The offending field (JSON key), when one is to blame.
    pub field: Option<String>,
}

impl Location {
    pub fn file(file: impl Into<String>) -> Self {
        Location { file: file.into(), layer: None, field: None }
    }
    pub fn layer(mut self, name: impl Into<String>, index: usize) -> Self {
        self.layer = Some((name.into(), index));
        self
    }
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((name, index)) = &self.layer {
            write!(f, ": layer '{name}' (#{index})")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field '{field}'")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A network or layer description is invalid (bad JSON, unknown type or key, impossible shapes, cycles...).
    #[error("{location}: {message}")]
    Spec { location: Location, message: String },

    /// The cause is part of the message (and deliberately not a `#[source]`, so `{:#}` does not print it twice).
    #[error("{}: {cause}", path.display())]
    Io { path: PathBuf, cause: std::io::Error },

    /// A data file (CSV) is malformed.
    #[error("{}: line {line}: {message}", path.display())]
    Data { path: PathBuf, line: u64, message: String },

    /// A trained model is missing, corrupt or does not match this build / these features.
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },

    /// Unknown device or invalid device profile.
    #[error("device '{device}': {message}")]
    Device { device: String, message: String },

    /// A sensor could not be read or is not present on this machine.
    #[error("{sensor}: {message}")]
    Sensor { sensor: String, message: String },

    /// The inference engine failed to build or run a workload.
    #[error("executor: {0}")]
    Executor(String),

    /// An engine the command needs is not installed or cannot be loaded (the message says how to install it).
    #[error("{0}")]
    EngineUnavailable(String),

    /// An ONNX graph could not be imported.
    #[error("{file}: {message}")]
    Onnx { file: String, message: String },

    /// Invalid argument to a library call (also used by the C ABI).
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn spec(location: Location, message: impl Into<String>) -> Self {
        Error::Spec { location, message: message.into() }
    }
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), cause: source }
    }
    pub fn model(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Model { path: path.as_ref().to_path_buf(), message: message.into() }
    }
    pub fn data(path: impl AsRef<Path>, line: u64, message: impl Into<String>) -> Self {
        Error::Data { path: path.as_ref().to_path_buf(), line, message: message.into() }
    }
}

/// The message of a caught panic (an engine's: perfmodel's own code returns errors).
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

thread_local! {
    /// Set while [`catch_engine_panic`] runs an engine call on this thread.
    static ENGINE_CALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run an engine call whose panics are the input's fault (tract asserts on some malformed graphs instead of
/// returning an error): a panic becomes `Err(its message)` for the caller to turn into an error naming the input,
/// and, with [`quiet_engine_panics`] installed, prints nothing of its own.
pub fn catch_engine_panic<R>(f: impl FnOnce() -> R) -> std::result::Result<R, String> {
    let was = ENGINE_CALL.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    ENGINE_CALL.with(|c| c.set(was));
    result.map_err(|p| panic_text(p.as_ref()))
}

/// Keep the default panic report for everything but the engine panics [`catch_engine_panic`] catches and
/// reports as errors (the binary installs this at start).
pub fn quiet_engine_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !ENGINE_CALL.with(|c| c.get()) {
            default(info);
        }
    }));
}
