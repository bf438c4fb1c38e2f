//! perfmodel predicts how long a neural network's inference takes, how much energy it uses and how much memory
//! it needs on a device, by summing per-layer predictions of small regressors trained on single-layer
//! measurements (Sponner, Waschneck & Kumar, "AI-Driven Performance Modeling for AI Inference Workloads",
//! Electronics 2022).
//!
//! The pipeline: [`zoo`] architectures → [`sample`] representative layer configs → [`collect`] measurements on a
//! device with a real engine ([`engine`]) → [`train`] one regressor per (device, layer type, metric) →
//! [`estimate`] a whole network. [`layer`] and [`network`] describe what is being modelled, and
//! [`layer::LayerConfig::features`] is the one feature code path all stages share.

pub mod collect;
pub mod cpu_clock;
pub mod data;
pub mod device;
pub mod dirs;
pub mod engine;
pub mod error;
pub mod estimate;
pub mod ffi;
pub(crate) mod filled;
pub mod fsio;
pub mod layer;
pub mod metric;
pub mod network;
pub mod onnx;
pub mod sample;
pub mod stats;
pub mod train;
pub mod units;
pub mod zoo;

pub use dirs::Dirs;
pub use error::{Error, Result};
pub use layer::{LayerConfig, LayerType, Op, Shape};
pub use metric::Metric;
pub use network::{Layer, Network};
/// The inline vectors of the public types (`Shape`, `network::Sources`, `layer::InputShapes`), for callers that
/// build them.
pub use smallvec;

/// Version of this crate, recorded with collected data and trained models.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
