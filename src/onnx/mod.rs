//! ONNX in both directions: [`export`] builds in-memory ONNX graphs that the tract engine runs (single layers
//! for collection, whole networks for `perfmodel bench`), and [`import_onnx`] reads a user's ONNX file into a
//! perfmodel [`Network`].

pub mod export;

use crate::error::{Error, Result};
use crate::network::Network;
use std::path::Path;

pub use export::{export_layer, export_network, Exported};

/// Import an ONNX file as a network.
pub fn import_onnx(path: &Path, allow_unsupported: bool) -> Result<Network> {
    let _ = allow_unsupported;
    Err(Error::Onnx { file: path.display().to_string(), message: "ONNX import is not implemented yet".into() })
}
