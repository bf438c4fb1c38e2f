//! ONNX in both directions: [`export`] builds in-memory ONNX graphs that the tract engine runs (single layers
//! for collection, whole networks for `perfmodel bench`), and [`import_onnx`] reads a user's ONNX file into a
//! perfmodel [`Network`].

pub mod export;
pub mod import;
pub mod transposes;

pub use export::{export_layer, export_network, value_info_shape, Exported};
pub use import::{import_onnx, import_proto};
